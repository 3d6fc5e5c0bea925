"""kernels/dispatch.py: each part of a model is matched to the kernels that declare it, and what a
run records and says follows from the declarations."""

from __future__ import annotations

import pytest

from attnmt.config import ModelConfig
from attnmt.kernels import dispatch
from attnmt.models.seq2seq import Seq2Seq


def _paths(device="cpu", **model):
    cfg = ModelConfig(layers=1, hidden=8, embed=8, **model)
    return dispatch.paths(Seq2Seq(cfg, 20, 20), device)


def test_the_default_lstm_takes_its_kernels_and_says_nothing():
    paths = _paths(attention="global", score="general")
    assert paths["LuongDecoder: decoder loop"] == "fused_rnn.input_feeding_loop"
    assert paths["LuongDecoder: search step"] == "lstm_steps.infer_step"
    assert paths["attention GlobalAttention: attention steps"] == "attention_steps.global_steps"
    assert paths["Seq2Seq: loss"] == "fused_loss.linear_cross_entropy"
    assert dispatch.fallbacks(paths) == []


@pytest.mark.parametrize("attention, path", [("local-p", "local_decoding.decode"),
                                             ("local-m", "local_decoding.decode")])
def test_local_attention_decodes_through_its_kernel(attention, path):
    paths = _paths(attention=attention, score="dot", window=2)
    assert paths["attention LocalAttention: attention search"] == path
    assert paths["LuongDecoder: decoder loop"] == "fused_rnn.StepLoop"


def test_a_score_no_kernel_covers_is_one_line_with_its_reason():
    paths = _paths(attention="global", score="concat")
    assert paths["LuongDecoder: decoder loop"] == "fused_rnn.StepLoop"
    assert dispatch.fallbacks(paths) == [
        "attention GlobalAttention: reference path (score concat: not a dot product with the memory)"]
    assert dispatch.fallbacks(_paths(attention="global", score="concat", input_feed=False)) == \
        dispatch.fallbacks(paths)


def test_cpu_kernels_on_a_gpu_are_recorded_but_not_said():
    paths = _paths("cuda", attention="global", score="dot")
    assert paths["LuongDecoder: decoder loop"].startswith("reference (device cuda")
    assert paths["attention GlobalAttention: attention steps"] == "attention_steps.global_steps"
    assert dispatch.fallbacks(paths) == []


def test_a_subclass_is_a_new_definition():
    """Kernels match their definition's class exactly: a subclass may change the maths."""
    from attnmt.attention.global_attention import GlobalAttention

    class Tweaked(GlobalAttention):
        pass

    kernel, why = dispatch.choose("attention steps", Tweaked("dot", 8, 8))
    assert kernel is None and why == "no fused kernel declares it"
    assert dispatch.choose("attention steps", GlobalAttention("dot", 8, 8))[0] is not None
