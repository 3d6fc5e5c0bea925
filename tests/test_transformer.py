"""Transformer encoder-decoder and LM: incremental decoding, search, training end to end, learning."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from attnmt.attention import variant_names
from attnmt.attention.variant import unit_of
from attnmt.config import Config, ModelConfig
from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.decode.search import beam_search, greedy_search
from attnmt.errors import UserError
from attnmt.models import build_model
from attnmt.models.common import select_batch

VARIANTS = variant_names()  # every registered variant: the built-ins and tests/plugins' (conftest.py)


def _cfg(task="translate", **model):
    cfg = Config(model=ModelConfig(type="transformer"))
    cfg.task = task
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 4, 32, 0.0
    m.window_segment = 2
    for k, v in model.items():
        setattr(m, k, v)
    return cfg


def _batch(seed=0, V=30):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (3, 8), generator=g)
    lengths = torch.tensor([8, 5, 2])
    src[1, 5:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(4, V, (3, 7), generator=g)
    tgt[:, 0] = BOS
    return src, lengths, tgt


def _incremental(model, src, lengths, tgt, reorder=False):
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    logits, weights = [], []
    for t in range(tgt.size(1)):
        if reorder and t == 3:  # beam search reorders rows: an identity permutation must be harmless
            index = torch.arange(src.size(0))
            state, enc = select_batch(state, index), select_batch(enc, index)
        lo, state, w = model.step(tgt[:, : t + 1], state, enc, need_weights=True)
        logits.append(lo)
        weights.append(w)
    return torch.stack(logits, 1), (torch.stack(weights, 1) if weights[0] is not None else None)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("norm,positions", [("pre", "sinusoidal"), ("post", "learned"), ("pre", "none")])
def test_incremental_decoding_equals_full_forward(variant, norm, positions):
    cross = "standard" if unit_of(variant).self_only else variant
    cfg = _cfg(norm=norm, positions=positions, enc_self_attention=variant,
               dec_self_attention=variant, cross_attention=cross)
    torch.manual_seed(0)
    model = build_model(cfg, 30, 31).eval()
    src, lengths, tgt = _batch()
    with torch.no_grad():
        full, full_w = model(src, lengths, tgt, need_weights=True)
        inc, inc_w = _incremental(model, src, lengths, tgt, reorder=True)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(inc_w, full_w, atol=1e-6, rtol=1e-5)
    assert full_w.shape == (3, 7, 8)
    torch.testing.assert_close(full_w.sum(-1), torch.ones(3, 7)) if not variant.startswith("window-mul") else None
    assert torch.all(full_w[1, :, 5:] == 0) and torch.all(full_w[2, :, 2:] == 0)  # padding


@pytest.mark.parametrize("variant", VARIANTS)
def test_lm_incremental_equals_full_and_ignores_source(variant):
    cfg = _cfg("lm", dec_self_attention=variant)
    torch.manual_seed(0)
    model = build_model(cfg, 0, 31).eval()
    assert isinstance(model.output, nn.Linear) and model.output.weight is model.embed.embed.weight
    _, _, tgt = _batch()
    empty = torch.zeros(3, 0, dtype=torch.long)
    zero = torch.zeros(3, dtype=torch.long)
    with torch.no_grad():
        full, weights = model(empty, zero, tgt)
        inc, _ = _incremental(model, empty, zero, tgt)
    assert weights is None and full.shape == (3, 7, 31)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["window-add-seg", "window-mul"])
def test_beam_search_runs_with_window_decoder_self_attention(variant):
    cfg = _cfg(dec_self_attention=variant, enc_self_attention=variant, cross_attention=variant)
    torch.manual_seed(0)
    model = build_model(cfg, 30, 31).eval()
    src, lengths, _ = _batch()
    limits = {"max_len_ratio": 1.0, "max_len_extra": 2}
    greedy = greedy_search(model, src, lengths, need_weights=True, **limits)
    beam1 = beam_search(model, src, lengths, beam_size=1, length_penalty=0.0, need_weights=True, **limits)
    for g, b in zip(greedy, beam1):
        assert g[0].tokens == b[0].tokens
    beam = beam_search(model, src, lengths, beam_size=4, nbest=2, need_weights=True, **limits)
    for sent, n in zip(beam, lengths.tolist()):
        assert len(sent) == 2 and sent[0].score >= sent[1].score
        rows = sent[0].attention.shape[0]  # one per step; no </s> step when stopped at the limit
        assert rows in (len(sent[0].tokens), len(sent[0].tokens) + 1) and sent[0].attention.shape[1] == 8
        assert torch.all(sent[0].attention[:, n:] == 0)


def test_config_errors_are_user_errors():
    with pytest.raises(UserError, match="cross_attention"):
        build_model(_cfg(cross_attention="relative"), 10, 10)
    with pytest.raises(UserError, match="enc_self_attention"):
        build_model(_cfg(enc_self_attention="windowed"), 10, 10)
    with pytest.raises(UserError, match="multiple"):
        build_model(_cfg(heads=3), 10, 10)
    with pytest.raises(UserError, match="norm"):
        build_model(_cfg(norm="sandwich"), 10, 10)
    with pytest.raises(UserError, match="share_embeddings"):
        build_model(_cfg(share_embeddings=True), 10, 12)


def test_embeddings_sharing_and_tying():
    model = build_model(_cfg(share_embeddings=True), 20, 20)
    assert model.src_embed.embed is model.tgt_embed.embed
    assert model.output.weight is model.tgt_embed.embed.weight
    untied = build_model(_cfg(tie_output=False), 20, 20)
    assert untied.output.weight is not untied.tgt_embed.embed.weight


def test_variants_apply_to_the_lowest_layers_only():
    cfg = _cfg(layers=3, attention_layers=2, enc_self_attention="window-add-seg",
               cross_attention="window-add-seg", dec_self_attention="standard")
    model = build_model(cfg, 10, 10)
    kinds = [(layer.self_attn.variant, layer.cross_attn.variant) for layer in model.decoder.layers]
    assert kinds == [("standard", "window-add-seg")] * 2 + [("standard", "standard")]
    assert [layer.self_attn.variant for layer in model.encoder.layers] == ["window-add-seg"] * 2 + ["standard"]


def _reverse_data(n, V=12, seed=0, reverse=True):
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        length = int(torch.randint(3, 7, (1,), generator=g))
        s = torch.randint(4, V, (length,), generator=g).tolist()
        src.append(s)
        tgt.append(s[::-1] if reverse else s)
    return src, tgt


@pytest.mark.parametrize("variant,task,steps,need", [("standard", "reverse", 200, 40), ("window-add-seg", "copy", 120, 35)])
def test_small_transformer_learns_a_synthetic_task(variant, task, steps, need):
    from attnmt.data.batching import collate

    torch.manual_seed(0)
    cfg = _cfg(layers=2, hidden=32, heads=4, ff=64, enc_self_attention=variant, cross_attention=variant)
    model = build_model(cfg, 12, 12)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    src, tgt = _reverse_data(64 * steps, reverse=task == "reverse")
    for step in range(steps):
        idx = list(range(step * 64, step * 64 + 64))
        b = collate([src[i] for i in idx], [tgt[i] for i in idx], idx)
        logits, _ = model(b.src, b.src_lengths, b.tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 12), b.tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    test_src, test_tgt = _reverse_data(50, seed=1, reverse=task == "reverse")
    b = collate(test_src, None, list(range(50)))
    hyps = greedy_search(model, b.src, b.src_lengths)
    correct = sum(h[0].tokens == t for h, t in zip(hyps, test_tgt))
    assert correct >= need, correct  # untrained: 0; measured 48 (reverse) and 42 (copy)


def _write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def test_train_translate_and_score_end_to_end(tmp_path, capsys):
    from attnmt.decode.translate import Translator
    from attnmt.train.run import run_training

    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    src, tgt = _reverse_data(200, V=12)
    en = [" ".join(words[i - 4] for i in s) for s in src]
    es = [" ".join(words[i - 4].upper() for i in t) for t in tgt]
    _write(tmp_path / "train.en", en)
    _write(tmp_path / "train.es", es)
    _write(tmp_path / "dev.en", en[:20])
    _write(tmp_path / "dev.es", es[:20])
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data: {{train: {tmp_path}/train, dev: {tmp_path}/dev, tokenizer: word}}\n"
        "model: {type: transformer, layers: 1, hidden: 16, heads: 2, ff: 32,\n"
        "        enc_self_attention: window-add-seg, cross_attention: window-mul, dec_self_attention: window-add}\n"
        "train: {optimizer: adam, lr: 0.003, warmup: 5, batch_size: 50, max_steps: 8, valid_every: 4}\n"
    )
    summary = run_training(str(config), str(tmp_path / "run"), [], False)
    assert summary["step"] == 8 and summary["best_dev_ppl"] < float("inf")
    translator = Translator.from_run(tmp_path / "run", device="cpu")
    out = translator.translate(["a b c", "d e"], beam=3, with_attention=True)
    assert len(out) == 2 and out[0][0].attention is not None
    assert out[0][0].attention.shape[1] == 3
    from attnmt.cli.main import main

    assert main(["analyse", "windows", "--model", str(tmp_path / "run"), "--input", "a b c d",
                 "--out", str(tmp_path / "win")]) == 0
    report = json.loads((tmp_path / "win" / "windows.json").read_text())
    kinds = {(x["kind"], x["variant"]) for x in report["layers"]}
    assert kinds == {("encoder self", "window-add-seg"), ("cross", "window-mul"), ("decoder self", "window-add")}
    enc = next(x for x in report["layers"] if x["kind"] == "encoder self")
    for head in enc["heads"]:
        assert len(head["window"]) == 4 and all(0 <= lo <= hi < 4 for lo, hi in head["window"])
        assert all(0 <= v <= 1 for row in head["mask"] for v in row)
    assert all((tmp_path / "win" / x["png"]).stat().st_size > 1000 for x in report["layers"])

    _write(tmp_path / "stats.en", ["a b c", "", "d e a b"])
    _write(tmp_path / "stats.es", ["A B", "", "C D E"])
    capsys.readouterr()
    assert main(["analyse", "window-stats", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "stats.en"),
                 "--target", str(tmp_path / "stats.es"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sentences"] == 2  # the empty line is skipped
    assert {(x["kind"], x["layer"]) for x in stats["layers"]} == {("encoder self", 1), ("cross", 1), ("decoder self", 1)}
    for row in stats["layers"]:
        assert 0 < row["width"] <= 1 and 0 < row["hard_width"] <= 1 and 0 <= row["offset"] <= 1
        assert 0 <= row["inside"] <= 1 + 1e-6
    _write(tmp_path / "short.es", ["a b"])
    assert main(["analyse", "window-stats", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "stats.en"),
                 "--target", str(tmp_path / "short.es")]) == 2
    assert "short.es" in capsys.readouterr().err


def test_lm_trains_end_to_end(tmp_path):
    from attnmt.eval.perplexity import perplexity_report
    from attnmt.train.run import run_training

    lines = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 20
    _write(tmp_path / "train.txt", lines)
    _write(tmp_path / "dev.txt", lines[:6])
    config = tmp_path / "lm.yaml"
    config.write_text(
        f"task: lm\ndata: {{train: {tmp_path}/train.txt, dev: {tmp_path}/dev.txt, tokenizer: word}}\n"
        "model: {type: transformer, layers: 1, hidden: 16, heads: 2, ff: 32, dec_self_attention: window-add}\n"
        "train: {optimizer: adam, lr: 0.01, warmup: 5, batch_size: 20, max_steps: 30, valid_every: 30}\n"
    )
    summary = run_training(str(config), str(tmp_path / "run"), [], False)
    assert summary["best_dev_ppl"] < 8  # vocabulary of 12 words; uniform would be ~13
    result = perplexity_report(str(tmp_path / "run"), str(tmp_path / "dev.txt"))["results"][0]
    assert abs(result["ppl"] - summary["best_dev_ppl"]) < 1e-2
    assert EOS == 3


def test_sinusoidal_positions_read_from_the_kept_table_equal_a_fresh_one():
    from attnmt.models.transformer import Embedder, sinusoidal

    cfg = _cfg(positions="sinusoidal").model
    emb = Embedder(30, cfg).eval()
    ids = torch.randint(4, 30, (2, 3))
    for offset in (0, 5, 300):  # 300 + 3 outgrows the first table (256 rows)
        got = emb(ids, offset)
        want = emb.embed(ids) * emb.scale + sinusoidal(offset + 3, cfg.hidden)[offset:]
        torch.testing.assert_close(got, want)
