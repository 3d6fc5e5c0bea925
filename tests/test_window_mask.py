"""Differentiable window attention's soft masks (attention/window.py): the cumulative-sum form
against the paper's matrix form, their range, hard windows from one-hot pointers, segments, and
the mask's hand-written backward."""

from __future__ import annotations

import pytest
import torch

from attnmt.attention import window as window_module
from attnmt.attention.window import soft_window_mask


def _one_hot(n, i):
    return torch.nn.functional.one_hot(torch.tensor(i), n).float()


def _random_pointers(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * 3, -1), torch.softmax(torch.randn(*shape, generator=g) * 3, -1)


def _dense_reference(phi_l, phi_r, segment, mask):
    """The issue's matrix form: U (U[i, j] = 1 for i <= j) or U_seg[i, :] = U[b⌊i/b⌋, :]."""
    n = phi_l.size(-1)
    U = torch.triu(torch.ones(n, n, dtype=phi_l.dtype))
    if segment > 1:
        U = U[(torch.arange(n) // segment) * segment]
    f, g = phi_l @ U, phi_r @ U.t()
    f_b, g_b = phi_l @ U.t(), phi_r @ U
    fw, bw = f * g, f_b * g_b
    if mask == "sum":
        return fw + bw
    if mask == "union":
        return fw + bw - fw * bw
    return fw + bw - (f + f_b - 1) * (g + g_b - 1)


@pytest.mark.parametrize("mask", ["exact", "union", "sum"])
@pytest.mark.parametrize("segment", [0, 2, 3])
def test_cumsum_masks_match_the_matrix_definition(mask, segment):
    phi_l, phi_r = _random_pointers(2, 5, 11)
    got = soft_window_mask(phi_l, phi_r, segment, mask)
    want = _dense_reference(phi_l, phi_r, segment, mask)
    if mask != "sum":
        want = want.clamp(0, 1)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mask", ["exact", "union"])
@pytest.mark.parametrize("segment", [0, 2, 4])
def test_masks_lie_in_unit_interval(mask, segment):
    for seed in range(5):
        phi_l, phi_r = _random_pointers(3, 7, 13, seed=seed)
        m = soft_window_mask(phi_l, phi_r, segment, mask)
        assert m.min() >= 0 and m.max() <= 1


@pytest.mark.parametrize("mask", ["exact", "union"])
def test_one_hot_pointers_give_the_hard_window_in_both_orders(mask):
    n = 9
    for left in range(n):
        for right in range(n):
            m = soft_window_mask(_one_hot(n, left), _one_hot(n, right), 0, mask)
            lo, hi = min(left, right), max(left, right)
            want = torch.tensor([1.0 if lo <= j <= hi else 0.0 for j in range(n)])
            assert torch.equal(m, want), (left, right, m)


def test_paper_sum_double_counts_only_where_both_pointers_meet():
    n = 6
    m = soft_window_mask(_one_hot(n, 3), _one_hot(n, 3), 0, "sum")
    assert m.tolist() == [0, 0, 0, 2, 0, 0]
    m = soft_window_mask(_one_hot(n, 1), _one_hot(n, 4), 0, "sum")
    assert m.tolist() == [0, 1, 1, 1, 1, 0]


def test_segment_masks_with_one_hot_pointers_cover_whole_segments():
    n, b = 10, 3  # segments [0..2] [3..5] [6..8] [9]
    m = soft_window_mask(_one_hot(n, 4), _one_hot(n, 7), b, "exact")
    assert m.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 0]
    m = soft_window_mask(_one_hot(n, 9), _one_hot(n, 1), b, "exact")  # l > r: backward term
    assert m.tolist() == [1] * 10


@pytest.mark.parametrize("b", [2, 3, 4])
def test_segment_masks_are_constant_inside_a_segment(b):
    phi_l, phi_r = _random_pointers(4, 6, 11, seed=3)
    for mask in ("exact", "union", "sum"):
        m = soft_window_mask(phi_l, phi_r, b, mask)
        for start in range(0, 11, b):
            seg = m[..., start : start + b]
            assert torch.allclose(seg, seg[..., :1].expand_as(seg), atol=1e-6)


@pytest.mark.parametrize("mask", ["exact", "union", "sum"])
@pytest.mark.parametrize("segment", [0, 3])
def test_mask_gradients_match_autograd_of_the_matrix_definition(mask, segment):
    """The mask's backward against autograd of the dense form."""
    g = torch.Generator().manual_seed(4)
    logits_l = torch.randn(2, 3, 10, generator=g, dtype=torch.float64, requires_grad=True)
    logits_r = torch.randn(2, 3, 10, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 3, 10, generator=g, dtype=torch.float64)
    grads = []
    for fn in (lambda a, b: soft_window_mask(a, b, segment, mask), lambda a, b: _dense_reference(a, b, segment, mask)):
        out = (fn(torch.softmax(logits_l, -1), torch.softmax(logits_r, -1)) * weight).sum()
        grads.append(torch.autograd.grad(out, (logits_l, logits_r)))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)
    phi = torch.softmax(torch.randn(1, 2, 7, generator=g, dtype=torch.float64), -1).requires_grad_()
    phi_r = torch.softmax(torch.randn(1, 2, 7, generator=g, dtype=torch.float64), -1).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: soft_window_mask(a, b, segment, mask), (phi, phi_r))


@pytest.mark.parametrize("mask", ["exact", "union", "sum"])
@pytest.mark.parametrize("segment", [0, 3])
def test_mask_backward_is_the_same_with_kept_or_recomputed_terms(mask, segment, monkeypatch):
    """The CPU keeps the forward's cumulative sums for the backward, a GPU recomputes them from φ̂
    (less memory): both give one gradient, and on the CPU it is that of the dense definition."""
    g = torch.Generator().manual_seed(5)
    phi = torch.softmax(torch.randn(2, 3, 2, 4, 9, generator=g, dtype=torch.float64) * 3, -1)
    weight = torch.randn(2, 3, 4, 9, generator=g, dtype=torch.float64)  # d loss / d M
    p = window_module.segment_mass(phi, segment) if segment > 1 else phi
    grad = window_module.segment_mass(weight, segment) if segment > 1 else weight
    kept = window_module._mask_backward(grad, p, mask, window_module._mask_terms(p, mask)[1])
    recomputed = window_module._mask_backward(grad, p, mask)
    torch.testing.assert_close(kept, recomputed, rtol=0, atol=0)
    # through the softmax, as the pointers reach the mask (the dense form uses Σ φ̂ = 1)
    logits = phi.log().requires_grad_()
    got = torch.autograd.grad((window_module.window_mask(logits.softmax(-1), segment, mask) * weight).sum(), logits)[0]
    dense = logits.softmax(-1)
    made = _dense_reference(dense[..., 0, :, :], dense[..., 1, :, :], segment, mask)
    torch.testing.assert_close(got, torch.autograd.grad((made * weight).sum(), logits)[0])
    monkeypatch.setattr(window_module, "KEEP_TOKEN_TERMS_ON", ())  # as on a GPU: recomputed from φ̂
    again = torch.autograd.grad((window_module.window_mask(logits.softmax(-1), segment, mask) * weight).sum(), logits)[0]
    torch.testing.assert_close(again, got, rtol=0, atol=0)


