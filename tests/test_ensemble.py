"""Ensembles (one model == the model; two identical == one; mixed tokenizers) and averaging."""

from __future__ import annotations

import pytest
import torch
from analysis_fixtures import SRC, TGT, make_run

from attnmt.cli.main import main
from attnmt.data.batching import collate
from attnmt.decode.ensemble import Ensemble, EnsembleTranslator, load_members, load_translator
from attnmt.decode.search import beam_search, greedy_search
from attnmt.decode.translate import OutputCut, Translator
from attnmt.errors import UserError
from attnmt.runs.checkpoint import list_checkpoints, load_weights
from attnmt.runs.loader import load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ens")
    return {
        "dot": make_run(root, "dot", ["model.attention=global", "model.score=dot", "data.reverse_source=true"]),
        "localp": make_run(root, "localp", ["model.attention=local-p", "model.score=general",
                                            "model.hidden=24", "model.embed=12"], seed=3),
        # another source vocabulary and direction, same target vocabulary
        "other_src": make_run(root, "other_src", ["model.attention=none", "model.input_feed=false"],
                              src_lines=SRC + ["completely different words here"], seed=5),
        "other_tgt": make_run(root, "other_tgt", [], tgt_lines=TGT + ["palabras nuevas"], seed=6),
        "multi": make_run(root, "multi", ["model.attention=global", "model.score=general"], seed=7,
                          steps=(10, 20, 30)),
    }


def _batch(run):
    loaded = load_run(run, device="cpu")
    model, cfg, src_tok = loaded.model, loaded.cfg, loaded.src_tok
    ids = [src_tok.encode(s) for s in SRC]
    if cfg.data.reverse_source:
        ids = [x[::-1] for x in ids]
    b = collate(ids, None, list(range(len(ids))))
    return model, b.src, b.src_lengths


@pytest.mark.parametrize("mode", ["logprob", "prob"])
def test_ensemble_of_one_and_of_two_identical_equals_the_model(runs, mode):
    model, src, lengths = _batch(runs["dot"])
    ref = beam_search(model, src, lengths, beam_size=3, nbest=3, max_len_ratio=1.0)
    for ens in (Ensemble([model], mode), Ensemble([model, model], mode)):
        got = beam_search(ens, src, lengths, beam_size=3, nbest=3, max_len_ratio=1.0)
        for r, g in zip(ref, got):
            assert [h.tokens for h in r] == [h.tokens for h in g]
            assert [h.score for h in r] == pytest.approx([h.score for h in g], abs=1e-5)
    g1 = greedy_search(model, src, lengths, 1.0)
    g2 = greedy_search(Ensemble([model, model], mode), src, lengths, 1.0)
    assert [h[0].tokens for h in g1] == [h[0].tokens for h in g2]


def test_combination_rules(runs):
    m1, src, lengths = _batch(runs["dot"])
    m2, _, _ = _batch(runs["dot"])
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(0.5 * torch.randn_like(p))
    prefix = torch.full((src.size(0), 1), 2)
    outs = []
    for m in (m1, m2):
        enc = m.encode(src, lengths)
        outs.append(torch.log_softmax(m.step(prefix, m.init_state(enc), enc)[0], -1))
    for mode, expected in (("logprob", (outs[0] + outs[1]) / 2),
                           ("prob", torch.log((outs[0].exp() + outs[1].exp()) / 2))):
        ens = Ensemble([m1, m2], mode)
        enc = ens.encode(src, lengths)
        got = ens.step(prefix, ens.init_state(enc), enc)[0]
        assert torch.allclose(got, expected, atol=1e-5)


def test_translator_equivalence_with_own_tokenizers(runs):
    lines = SRC + ["unknown words dog"]
    single = Translator.from_run(runs["dot"], device="cpu").translate(lines, beam=3)
    one = EnsembleTranslator(load_members([str(runs["dot"])], device="cpu"))
    two = EnsembleTranslator(load_members([str(runs["dot"])] * 2, device="cpu"))
    for ens in (one, two):
        got = ens.translate(lines, beam=3, batch_size=2)
        assert [h[0].text for h in got] == [h[0].text for h in single]
        assert [h[0].score for h in got] == pytest.approx([h[0].score for h in single], abs=1e-5)


def test_mixed_architectures_and_source_tokenizers(runs, tmp_path):
    ens = load_translator([str(runs["dot"]), str(runs["localp"]), str(runs["other_src"])], device="cpu")
    assert isinstance(ens, EnsembleTranslator)
    out = ens.translate(SRC, beam=2, nbest=2, batch_size=3)
    assert all(len(h) == 2 for h in out)
    # each model read its own source ids (reversed for "dot", its own vocabulary for "other_src")
    srcs = [m.src_tok for m in ens.members]
    assert len(srcs[2]) != len(srcs[0])
    f = tmp_path / "in.en"
    f.write_text("\n".join(SRC) + "\n", encoding="utf-8")
    o = tmp_path / "out"
    assert main(["translate", "--model", str(runs["dot"]), "--model", str(runs["localp"]), "-i", str(f),
                 "-o", str(o), "--ensemble-mode", "prob", "--beam", "2", "--replace-unk"]) == 0
    assert len(o.read_text(encoding="utf-8").splitlines()) == len(SRC)


def test_target_vocabulary_must_match(runs, capsys):
    with pytest.raises(UserError, match="target vocabulary differs"):
        load_members([str(runs["dot"]), str(runs["other_tgt"])], device="cpu")
    assert main(["translate", "--model", str(runs["dot"]), "--model", str(runs["other_tgt"])]) == 2
    assert "target vocabulary differs" in capsys.readouterr().err


def test_checkpoint_averaging(runs, tmp_path):
    ckpts = list_checkpoints(runs["multi"])
    assert len(ckpts) == 3
    out = tmp_path / "avg"
    assert main(["average", "--model", str(runs["multi"]), "--last", "2", "--out", str(out)]) == 0
    avg = load_weights(list_checkpoints(out)[0] / "model.safetensors")
    a, b = (load_weights(c / "model.safetensors") for c in ckpts[1:])
    for k in avg:
        assert torch.allclose(avg[k], (a[k] + b[k]) / 2, atol=1e-6)
    assert list_checkpoints(out)[0].name == ckpts[-1].name
    assert Translator.from_run(out, device="cpu").translate(["the dog"], beam=2)[0][0].text is not None
    assert main(["average", "--model", str(runs["multi"]), "--last", "4", "--out", str(tmp_path / "x")]) == 2
    assert main(["average", "--model", str(runs["multi"]), "--last", "1", "--out", str(out)]) == 2


def test_max_len_cap_limits_single_and_ensemble_outputs(runs, tmp_path):
    lines = SRC
    single = Translator.from_run(runs["dot"], device="cpu")
    free = single.translate(lines, beam=3, max_len_ratio=10.0)
    assert max(len(h[0].tgt_pieces) for h in free) > 2  # the cap below really binds
    for translator in (single, EnsembleTranslator(load_members([str(runs["dot"])] * 2, device="cpu"))):
        for beam in (1, 3):
            capped = translator.translate(lines, beam=beam, max_len_ratio=10.0, max_len_cap=2, at_cap="keep")
            assert max(len(h[0].tgt_pieces) for h in capped) <= 2
            assert any(h[0].cut for h in capped)  # kept, but marked
            with pytest.raises(OutputCut, match="line .* was cut at the length cap of 2"):
                translator.translate(lines, beam=beam, max_len_ratio=10.0, max_len_cap=2)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    # the command refuses to write outputs the cap cut (issue 14: no silent truncation)
    assert main(["translate", "--model", str(runs["dot"]), "-i", str(src), "-o", str(out), "--beam", "1",
                 "--max-len-ratio", "10", "--max-len-cap", "2"]) == 2
    assert not out.exists()


def test_parallel_batch_workers_give_the_same_translations(runs):
    """--workers N searches N batches at once, one thread each: same output as one at a time."""
    lines = SRC * 3
    translator = Translator.from_run(runs["dot"], device="cpu")
    one = translator.translate(lines, beam=3, batch_size=2, workers=1)
    two = translator.translate(lines, beam=3, batch_size=2, workers=2)
    assert [t[0].text for t in two] == [t[0].text for t in one]
    assert [t[0].score for t in two] == pytest.approx([t[0].score for t in one], abs=1e-5)
    assert torch.get_num_threads() >= 1
    translator.fork_workers = True  # attnmt translate's: the batches go to forked processes
    forked = translator.translate(lines, beam=3, batch_size=2, workers=2, with_attention=True)
    assert [t[0].text for t in forked] == [t[0].text for t in one]
    assert [t[0].score for t in forked] == pytest.approx([t[0].score for t in one], abs=1e-5)
    assert all(t[0].attention is not None and t[0].alignment is not None for t in forked)
