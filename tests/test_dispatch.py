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


def _transformer(**model):
    from attnmt.config import Config
    from attnmt.models import build_model

    cfg = Config(model=ModelConfig(type="transformer"))
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 2, 32, 0.0
    for key, value in model.items():
        setattr(m, key, value)
    return build_model(cfg, 30, 30).eval()


@pytest.mark.parametrize("encoder, decoder", [("alibi", "standard"), ("standard", "alibi")])
def test_a_mixed_transformer_records_each_attention_as_it_runs(encoder, decoder):
    """Encoder variant A, decoder variant B: each attention's record is its own choice (a record
    by class let the first one decide for all), and a search takes the path recorded."""
    import torch

    model = _transformer(enc_self_attention=encoder, dec_self_attention=decoder)
    paths = dispatch.paths(model, "cpu")
    fast = "kv_cache.one_query_attention"
    assert paths[f"decoder self-attention {decoder}: search self-attention"] == (
        fast if decoder == "standard" else "reference (no fused kernel declares it)")
    assert paths["cross-attention standard: search cross-attention"] == "kv_cache.SharedKeys.attend"
    assert paths[f"encoder self-attention {encoder}: multi-head attention"] == (
        "attention_dropout.context" if encoder == "standard" else "reference (no fused kernel declares it)")
    assert not any("encoder" in label and "search" in label for label in paths)  # an encoder runs no search step
    with torch.no_grad():
        enc = model.encode(torch.randint(4, 30, (2, 5)), torch.tensor([5, 3]))
        _, state, _ = model.step(torch.full((2, 1), 2), model.init_state(enc), enc)
    assert all(s.one_query == (decoder == "standard") for s in state["layers"])  # what the record says
    variant = encoder if encoder != "standard" else decoder
    role = "encoder" if encoder != "standard" else "decoder"
    why = "reference path (no fused kernel declares it)"
    assert dispatch.fallbacks(paths) == [f"{role} self-attention {variant}: {why}"]
    searched = dispatch.fallbacks(dispatch.paths(model, "cpu", dispatch.SEARCH))
    assert searched == ([] if role == "encoder" else dispatch.fallbacks(paths))  # translate: the search's parts


def test_layers_of_one_role_that_decide_apart_are_named_apart():
    model = _transformer(cross_attention="window-add-seg", window_segment=2, window_mask="full", attention_layers=1)
    paths = dispatch.paths(model, "cpu", dispatch.SEARCH)
    assert paths["cross-attention window-add-seg: search cross-attention"].startswith("reference (window mask 'full'")
    assert paths["cross-attention standard: search cross-attention"] == "kv_cache.SharedKeys.attend"
    model = _transformer(cross_attention="window-add-seg", window_segment=2, window_mask="full")
    model.decoder.layers[0].cross_attn.unit.options.mask = "exact"  # one layer's window changed in place
    paths = dispatch.paths(model, "cpu", dispatch.SEARCH)
    assert paths["cross-attention window-add-seg (decoder.layers.0.cross_attn): search cross-attention"] == \
        "window_search.context"
    assert paths["cross-attention window-add-seg (decoder.layers.1.cross_attn): search cross-attention"].startswith(
        "reference (window mask 'full'")
    assert dispatch.fallbacks(paths) == [
        "cross-attention window-add-seg (decoder.layers.1.cross_attn): reference path (window mask 'full' "
        "(an ablation without pointers))"]


def test_a_registered_score_is_asked_not_named():
    """A new score is one class: ``dot = True`` (a product with keys it derives once) takes the
    kernels of dot and general, with the reference path's results."""
    import torch

    from attnmt.attention import register
    from attnmt.attention.global_attention import _Product

    class ScaledDot(_Product):
        """score = h_tᵀ h̄_s / √d, as keys h̄_s / √d: a dot product for the kernels."""

        name = "scaled-dot"

        def keys(self, values):
            return values * values.size(-1) ** -0.5

    register(ScaledDot)
    from attnmt.errors import key_error

    ModelConfig(attention="local-p", score="scaled-dot").check("translate", key_error)  # a content score
    paths = _paths(attention="global", score="scaled-dot")
    assert paths["LuongDecoder: decoder loop"] == "fused_rnn.input_feeding_loop"
    assert paths["attention GlobalAttention: attention search"] == "attention_steps.global_decode"
    assert dispatch.fallbacks(paths) == []
    from attnmt.attention.global_attention import GlobalAttention

    att = GlobalAttention("scaled-dot", 8, 8)
    values, query = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    want = torch.softmax(query @ values.transpose(1, 2) / 8**0.5, -1) @ values
    with torch.no_grad():  # the search's kernel
        got, _ = att(query, att.prepare(values, mask))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(att(query, att.prepare(values, mask))[0], want)  # the reference path
