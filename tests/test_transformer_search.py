"""kernels/transformer_search.py: a bfloat16 search step of the Transformer decoder gives the
definition's logits bit for bit, so the same hypotheses and scores, in beam and greedy search,
with sentences leaving the batch; elsewhere the definition's step runs, and the dispatch record
says why."""

from __future__ import annotations

import pytest
import torch

import json
import sys
from pathlib import Path

from attnmt.config import Config, ModelConfig
from attnmt.data.vocab import BOS
from attnmt.decode.search import beam_search, greedy_search
from attnmt.kernels import dispatch, packed, transformer_search, window_search
from attnmt.models import build_model
from attnmt.models.common import repeat_rows, select_batch
from search_fixtures import off_and_on, padded_source

pytestmark = pytest.mark.skipif(not packed._MKLDNN or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                                reason="bfloat16 packed products need oneDNN's bfloat16 kernels")


def _model(bf16=True, **model):
    cfg = Config(model=ModelConfig(type="transformer"))
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 32, 4, 64, 0.0
    for k, v in model.items():
        setattr(m, k, v)
    torch.manual_seed(0)
    net = build_model(cfg, 40, 40).eval()
    for module in net.modules():
        if isinstance(module, packed.PackedLinear):
            module.bf16_search = bf16
    return net


def _source(rows=4, seed=1):
    return padded_source(rows, seed, vocab=40)


def _counted(monkeypatch, module=transformer_search, name="step") -> list:
    calls = []
    step = getattr(module, name)

    def counting(*args):
        calls.append(1)
        return step(*args)

    monkeypatch.setattr(module, name, counting)
    return calls


WINDOWS = [  # the window's cross-attention step (kernels/window_search.py) in each of its forms
    dict(cross_attention="window-add-seg", window_segment=2),
    dict(cross_attention="window-add-seg", window_mask="sum", window_pointers="input", window_temperature=1.0,
         window_segment=5),  # the authors' preset (window.PRESETS["paper"])
    dict(cross_attention="window-add", window_pointers="input", window_mask="union", window_temperature=0.5),
    dict(cross_attention="window-mul", window_renorm=True),
    dict(cross_attention="window-mul-seg", window_segment=3, window_mask="sum", attention_layers=1),
    dict(cross_attention="window-add", window_mask="full"),  # the ablation without pointers: the definition's call
]


def _both(model, search, *args, **kw):
    return off_and_on(model, "search_kernel", search, *args, **kw)


def _exactly_same(a, b):
    assert [[h.tokens for h in s] for s in a] == [[h.tokens for h in s] for s in b]
    assert [[h.logprob for h in s] for s in a] == [[h.logprob for h in s] for s in b]


@torch.no_grad()
@pytest.mark.parametrize("variants", [{}, *WINDOWS])
def test_step_logits_are_the_definitions_bit_for_bit(monkeypatch, variants):
    """Step by step through a beam search's moves (K copies after the first step, reorders, rows
    dropped), the kernel's state and the definition's give equal logits; a window's
    cross-attention through its own step after the first."""
    calls, windows = _counted(monkeypatch), _counted(monkeypatch, window_search, "context")
    model, (src, lengths) = _model(**variants), _source()
    logits = {}
    for on in (False, True):
        model.search_kernel = on
        enc = model.encode(src, lengths)
        state, prefix, seen = model.init_state(enc), torch.full((4, 1), BOS), []
        for t in range(6):
            out, state, _ = model.step(prefix, state, enc)
            if t == 0:  # beam search's K = 3 copies of each sentence
                out, state, enc, prefix = (out.repeat_interleave(3, 0), repeat_rows(state, 3),
                                           repeat_rows(enc, 3), prefix.repeat_interleave(3, 0))
            seen.append(out)
            index = torch.arange(out.size(0)).flip(0) if t % 2 else torch.arange(out.size(0))
            if t == 3:  # the first sentence leaves the batch
                index = torch.arange(3, out.size(0))
                enc = select_batch(enc, index)
            state = select_batch(state, index)
            prefix = torch.cat([prefix[index], out[index].argmax(-1, keepdim=True)], 1)
        logits[on] = seen
    assert len(calls) == 6  # every step of the kernel's run took it
    window_layers = (0 if not variants or variants.get("window_mask") == "full"
                     else 1 if variants.get("attention_layers") else 2)
    assert len(windows) == 5 * window_layers
    for a, b in zip(logits[False], logits[True]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("variants", [
    {},
    dict(dec_self_attention="relative"),  # a variant's self-attention: the definition's call inside the step
    dict(cross_attention="window-add-seg", window_segment=2),  # ... its cross-attention
    dict(dec_self_attention="window-mul", cross_attention="localness", attention_layers=1),  # layer 2 standard
])
def test_beam_and_greedy_search_give_the_definitions_hypotheses(monkeypatch, variants):
    calls = _counted(monkeypatch)
    model, (src, lengths) = _model(**variants), _source()
    kw = dict(max_len_ratio=1.5, max_len_extra=3)
    generic, fast = _both(model, beam_search, src, lengths, 5, nbest=3, stop="complete", **kw)
    _exactly_same(generic, fast)
    assert calls and any(len(h.tokens) > 3 for s in generic for h in s)
    _exactly_same(*_both(model, greedy_search, src, lengths, **kw))


def test_post_norm_takes_the_definition_and_says_why(monkeypatch):
    calls = _counted(monkeypatch)
    model, (src, lengths) = _model(norm="post"), _source(2)
    beam_search(model, src, lengths, 3, max_len_ratio=1.0, max_len_extra=2)
    assert not calls
    assert dispatch.paths(model, "cpu", dispatch.SEARCH)["Transformer: search step"] == "reference (post-norm layers)"


def test_the_record_names_the_kernel_and_other_searches_take_the_definition(monkeypatch):
    calls = _counted(monkeypatch)
    assert dispatch.paths(_model(), "cpu", dispatch.SEARCH)["Transformer: search step"] == "transformer_search.step"
    src, lengths = _source(2)
    beam_search(_model(bf16=False), src, lengths, 3, max_len_ratio=1.0, max_len_extra=2)  # float32 maps
    beam_search(_model(), src, lengths, 3, max_len_ratio=1.0, max_len_extra=2, need_weights=True)
    assert not calls
    beam_search(_model(), src, lengths, 3, max_len_ratio=1.0, max_len_extra=2)
    assert calls


def test_the_benchmark_times_both_steps_and_compares_their_translations(tmp_path, capsys, monkeypatch):
    """benchmarks/search_step.py on a tiny trained Transformer, bfloat16 forced (the tests' default
    search is float32: conftest)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import search_step

    from attnmt.cli.main import main as attnmt
    from tests.conftest import TINY_CONFIG, write_tiny_corpus

    write_tiny_corpus(tmp_path, n_train=200, n_dev=8)
    (tmp_path / "tiny.yaml").write_text(TINY_CONFIG.format(d=tmp_path), encoding="utf-8")
    run = tmp_path / "run"
    sets = ["model.type=transformer", "model.layers=1", "model.hidden=32", "model.heads=2", "model.ff=64",
            "train.max_steps=10", "train.threads=1"]
    assert attnmt(["train", str(tmp_path / "tiny.yaml"), "--out", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    calls = _counted(monkeypatch)
    capsys.readouterr()
    assert search_step.main(["--run", str(run), "--input", str(tmp_path / "dev.en"), "--batch-size", "1",
                             "--rounds", "2", "--lines", "3", "--threads", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert result["precision"] == "bf16" and result["same_translations"] and result["lines"] == 3
    assert len(result["definition_s"]) == len(result["kernel_s"]) == 2 and calls
    assert out[0].startswith("round 1: definition ") and "identical" in out[-2]
    assert search_step.main(["--run", str(tmp_path / "none"), "--input", str(tmp_path / "dev.en")]) == 2


def test_translate_with_the_window_preset_writes_the_definitions_translations(tmp_path, monkeypatch):
    """``attnmt translate`` of a tiny Transformer with the authors' window preset in encoder
    self- and cross-attention, bfloat16 forced (the tests' default search is float32: conftest):
    the kernels' file is the definition's, and the window's step took the cross-attention."""
    from attnmt.cli.main import main as attnmt
    from attnmt.models.transformer import Transformer
    from tests.conftest import TINY_CONFIG, write_tiny_corpus

    write_tiny_corpus(tmp_path, n_train=200, n_dev=8)
    (tmp_path / "tiny.yaml").write_text(TINY_CONFIG.format(d=tmp_path), encoding="utf-8")
    run = tmp_path / "run"
    sets = ["model.type=transformer", "model.layers=2", "model.hidden=32", "model.heads=2", "model.ff=64",
            "model.enc_self_attention=window-add-seg", "model.cross_attention=window-add-seg",
            "model.window_preset=paper", "train.max_steps=10", "train.threads=1"]
    assert attnmt(["train", str(tmp_path / "tiny.yaml"), "--out", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    windows = _counted(monkeypatch, window_search, "context")
    outputs = []
    for on in (False, True):
        monkeypatch.setattr(Transformer, "search_kernel", on)
        out = tmp_path / f"hyp.{on}"
        assert attnmt(["translate", "--model", str(run), "--input", str(tmp_path / "dev.en"), "--output", str(out),
                       "--beam", "3", "--workers", "1", "--batch-size", "4"]) == 0
        outputs.append(out.read_text(encoding="utf-8"))
        assert bool(windows) == on
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 8
