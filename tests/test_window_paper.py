"""The `paper` preset of the differentiable window against the authors' formulas.

The reference below is written out from the formulas of the authors' public code
(tungngthanh/dynamic-attention, LearnableGlobalLocalMultiheadAttention and its segment ("block")
subclass), with explicit matrices and loops over heads, in double precision:

    per head h, with x the query-side input and y the key-side input of the layer
    Q = (x W_q + b_q)/√d_h   K = y W_k + b_k   V = y W_v + b_v            global attention
    QL = x W_ql + b_ql       KL = y W_kl + b_kl   (and QR, KR)            pointers: unscaled
    QLoc = (x W_qloc + b_qloc)/√d_h   KLoc = y W_kloc + b_kloc           additive's local scores
    φ_l = softmax(QL KLᵀ), φ_r = softmax(QR KRᵀ)     padding keys at −∞
    U = upper-triangular ones (U[i, j] = 1 for i <= j); segments of b: J[i, :] = U[b⌊i/b⌋, :]
    M = (φ_l J) ⊙ (φ_r Jᵀ) + (φ_l Jᵀ) ⊙ (φ_r J)
    add: A = softmax(Q Kᵀ + (QLoc KLocᵀ) ⊙ M)      mul: A = softmax(Q Kᵀ) ⊙ M
    out = [A_1 V_1; …; A_H V_H] W_o + b_o

Our module's weights are read into that form (their Q_L/K_L pairs are our pointers' query/key
projections, left then right; Q_Loc/K_Loc our local_q/local_k).
"""

from __future__ import annotations

import pytest
import torch

from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.window import PRESETS, InputPointers, window_options
from attnmt.config import Config, ModelConfig, apply_overrides, load_config
from attnmt.errors import UserError
from attnmt.models import build_model

PAPER = PRESETS["paper"]


def _lin(x, weight, bias):
    return x @ weight.t() + bias


def _authors_reference(att: MultiHeadAttention, x, y, key_mask, combine: str, segment: int):
    """Output (B, T, D) and weights (B, H, T, S) from the formulas in the module docstring."""
    B, T, D = x.shape
    S, H = y.size(1), att.heads
    d = D // H
    scale = d ** -0.5
    ptr = att.pointers
    wq_l, wq_r = ptr.query.weight.chunk(2, 0)
    bq_l, bq_r = ptr.query.bias.chunk(2, 0)
    wk_l, wk_r = ptr.key.weight.chunk(2, 0)
    bk_l, bk_r = ptr.key.bias.chunk(2, 0)
    U = torch.triu(torch.ones(S, S, dtype=x.dtype))
    J = U[[segment * (i // segment) for i in range(S)], :] if segment > 1 else U
    pad = ~key_mask[:, None, :]  # (B, 1, S)
    out = torch.zeros(B, T, D, dtype=x.dtype)
    weights = torch.zeros(B, H, T, S, dtype=x.dtype)
    for h in range(H):
        cols = slice(h * d, (h + 1) * d)
        q = _lin(x, att.q.weight, att.q.bias)[..., cols] * scale
        k = _lin(y, att.k.weight, att.k.bias)[..., cols]
        v = _lin(y, att.v.weight, att.v.bias)[..., cols]
        ql, kl = _lin(x, wq_l, bq_l)[..., cols], _lin(y, wk_l, bk_l)[..., cols]
        qr, kr = _lin(x, wq_r, bq_r)[..., cols], _lin(y, wk_r, bk_r)[..., cols]
        phi_l = torch.softmax((ql @ kl.transpose(1, 2)).masked_fill(pad, float("-inf")), -1)
        phi_r = torch.softmax((qr @ kr.transpose(1, 2)).masked_fill(pad, float("-inf")), -1)
        m = (phi_l @ J) * (phi_r @ J.t()) + (phi_l @ J.t()) * (phi_r @ J)
        glob = q @ k.transpose(1, 2)
        if combine == "add":
            qloc = _lin(x, att.local_q.weight, att.local_q.bias)[..., cols] * scale
            kloc = _lin(y, att.local_k.weight, att.local_k.bias)[..., cols]
            a = torch.softmax((glob + (qloc @ kloc.transpose(1, 2)) * m).masked_fill(pad, float("-inf")), -1)
        else:
            a = torch.softmax(glob.masked_fill(pad, float("-inf")), -1) * m
        weights[:, h] = a
        out[..., cols] = a @ v
    return _lin(out, att.o.weight, att.o.bias), weights


def _paper_attention(variant: str) -> MultiHeadAttention:
    opts = window_options(variant, PAPER["window_segment"], PAPER["window_mask"], False,
                          PAPER["window_temperature"], PAPER["window_pointers"])
    att = MultiHeadAttention(16, 4, 0.0, variant, opts).double()
    with torch.no_grad():  # non-zero biases, so that a bias left out would show
        for p in att.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.3)
    return att


@pytest.mark.parametrize("variant", ["window-add", "window-mul", "window-add-seg", "window-mul-seg"])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_paper_preset_equals_the_authors_formulas(variant, kind):
    torch.manual_seed(0)
    att = _paper_attention(variant)
    assert isinstance(att.pointers, InputPointers) and att.pointers.tau == 1.0
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 16, generator=g, dtype=torch.float64) * 2
    y = x if kind == "self" else torch.randn(2, 12, 16, generator=g, dtype=torch.float64) * 2
    key_mask = torch.ones(2, y.size(1), dtype=torch.bool)
    key_mask[1, y.size(1) - 3:] = False  # padding in the second sentence
    out, weights = att(x, att.project_keys(y), key_mask, need_weights=True)
    segment = PAPER["window_segment"] if variant.endswith("-seg") else 0
    want_out, want_w = _authors_reference(att, x, y, key_mask, variant.split("-")[1], segment)
    torch.testing.assert_close(weights, want_w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-12)
    assert weights[1, ..., y.size(1) - 3:].abs().max() == 0  # padding gets nothing


def test_the_reference_detects_the_other_settings():
    """The check has teeth: today's defaults (mask exact, τ = 1/√d, pointers from q/k) differ."""
    torch.manual_seed(0)
    att = _paper_attention("window-add")
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    mask = torch.ones(1, 6, dtype=torch.bool)
    want, _ = _authors_reference(att, x, x, mask, "add", 0)
    for change in ({"mask": "exact"}, {"temperature": 0.5}):
        for key, value in change.items():
            setattr(att.unit.options, key, value)
            att.pointers.tau = value if key == "temperature" else att.pointers.tau
        got, _ = att(x, att.project_keys(x), mask)
        assert not torch.allclose(got, want, atol=1e-6)


def _write(tmp_path, model_lines: str):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  type: transformer\n  hidden: 16\n  heads: 4\n  enc_self_attention: window-add-seg\n"
                    "  cross_attention: window-add-seg\n" + model_lines, encoding="utf-8")
    return path


def test_preset_sets_the_authors_values(tmp_path):
    cfg = load_config(_write(tmp_path, "  window_preset: paper\n"))
    m = cfg.model
    assert (m.window_mask, m.window_pointers, m.window_temperature, m.window_segment) == ("sum", "input", 1.0, 5)
    # naming a preset value again is fine; --set of the preset on a plain config applies it too
    assert load_config(_write(tmp_path, "  window_preset: paper\n  window_segment: 5\n")).model.window_segment == 5
    plain = load_config(_write(tmp_path, ""))
    assert plain.model.window_mask == "exact" and plain.model.window_pointers == "attention"
    assert apply_overrides(plain, ["model.window_preset=paper"]).model.window_mask == "sum"


def test_preset_refuses_a_contradicting_key_with_file_and_line(tmp_path):
    with pytest.raises(UserError) as err:
        load_config(_write(tmp_path, "  window_preset: paper\n  window_mask: exact\n"))
    assert "window_mask" in str(err.value) and "c.yaml:8" in str(err.value)
    with pytest.raises(UserError, match="window_temperature"):
        load_config(_write(tmp_path, "  window_preset: paper\n"), ["model.window_temperature=0"])
    with pytest.raises(UserError, match="window_preset"):
        load_config(_write(tmp_path, "  window_preset: papers\n"))
    with pytest.raises(UserError, match="window_pointers"):
        load_config(_write(tmp_path, "  window_pointers: keys\n"))


@pytest.mark.parametrize("variant", ["window-add-seg", "window-mul"])
def test_paper_preset_decodes_incrementally_as_in_training(variant):
    cfg = Config(model=ModelConfig(type="transformer"))
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 4, 32, 0.0
    m.enc_self_attention = m.cross_attention = m.dec_self_attention = variant
    m.window_preset, m.attention_layers = "paper", 1
    cfg = apply_overrides(cfg, [])  # applies the preset
    torch.manual_seed(0)
    model = build_model(cfg, 30, 31).eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 30, (2, 9), generator=g)
    lengths = torch.tensor([9, 6])
    src[1, 6:] = 0
    tgt = torch.randint(4, 31, (2, 8), generator=g)
    tgt[:, 0] = 2
    with torch.no_grad():
        full, _ = model(src, lengths, tgt)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        steps = []
        for t in range(tgt.size(1)):
            logits, state, _ = model.step(tgt[:, : t + 1], state, enc)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
