"""kernels/padded_rows.py: training's bfloat16 products with their rows padded to a multiple of ROWS
are the unpadded products of the same roundings, forward and backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnmt.kernels import fused_loss, packed
from attnmt.kernels.padded_rows import ROWS, low_rows, rounded_product


def test_low_rows_pads_to_a_multiple_of_rows_with_zeros():
    x = torch.randn(3, 7, 5)  # 21 rows
    out = low_rows(x)
    assert out.dtype == torch.bfloat16 and out.shape == (ROWS, 5)
    assert torch.equal(out[:21], x.reshape(21, 5).to(torch.bfloat16))
    assert not out[21:].any()
    assert low_rows(torch.randn(ROWS + 1, 5)).shape == (2 * ROWS, 5)
    assert low_rows(torch.randn(ROWS, 5)).shape == (ROWS, 5)
    # a non-contiguous x (a transposed view) is read as its values
    t = torch.randn(5, 9).t()
    assert torch.equal(low_rows(t)[:9], t.to(torch.bfloat16))


def _reference(x, weight, sizes, high):
    """The definition: F.linear of the bfloat16 roundings through autograd, split like the kernel."""
    pieces = F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16)).split(sizes, dim=-1)
    return [p.float() if i < high else p for i, p in enumerate(pieces)]


def test_rounded_product_is_the_unpadded_product_of_the_roundings():
    torch.manual_seed(0)
    x = torch.randn(3, 11, 24, requires_grad=True)  # 33 rows: padded to ROWS
    w = torch.randn(10, 24, requires_grad=True)
    got = rounded_product(x, w, [2, 4, 3, 1], 2)
    assert [t.dtype for t in got] == [torch.float32] * 2 + [torch.bfloat16] * 2
    assert [t.shape for t in got] == [(3, 11, n) for n in (2, 4, 3, 1)]
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    want = _reference(x2, w2, [2, 4, 3, 1], 2)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), rtol=2**-7, atol=1e-3)
    # gradients of any layout: a transposed one for the first piece
    grads = [torch.randn(11, 3, 2).transpose(0, 1), torch.randn(3, 11, 4),
             torch.randn(3, 11, 3).to(torch.bfloat16), torch.randn(3, 11, 1).to(torch.bfloat16)]
    torch.autograd.backward(got, grads)
    torch.autograd.backward(want, grads)
    assert x.grad.dtype == w.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, x2.grad, rtol=2**-6, atol=2e-2)
    torch.testing.assert_close(w.grad, w2.grad, rtol=2**-6, atol=2e-2)
    one, = rounded_product(x, w)  # default: one float32 piece
    torch.testing.assert_close(one, torch.cat([t.float() for t in want], -1), rtol=2**-7, atol=1e-3)


def test_rounded_product_takes_an_unused_output_as_zero_gradient():
    torch.manual_seed(1)
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(6, 8, requires_grad=True)
    high, low = rounded_product(x, w, [4, 2], 1)
    (high * 2).sum().backward()  # ``low`` unused
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (_reference(x2, w2, [4, 2], 1)[0] * 2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=2**-6, atol=2e-2)
    torch.testing.assert_close(w.grad, w2.grad, rtol=2**-6, atol=2e-2)
    assert not w.grad[4:].any()  # the unused rows' weights get nothing


def test_products_under_bf16_products_pad_the_rows_of_their_product(monkeypatch):
    """packed.product (a PackedLinear in training) and the fused loss under bf16 products give
    oneDNN only row counts that are multiples of ROWS, whatever the batch's."""
    seen = []
    real_mm = torch.mm

    def mm(a, b, *rest, **kw):
        seen.append((*a.shape, *b.shape))
        return real_mm(a, b, *rest, **kw)

    torch.manual_seed(2)
    lin = packed.PackedLinear(16, 12)
    x = torch.randn(2, 37, 16, requires_grad=True)  # 74 rows, padded to 128
    out_weight = torch.randn(9, 12, requires_grad=True)  # a 9-word output layer
    target = torch.randint(0, 9, (74,))
    monkeypatch.setattr(torch, "mm", mm)
    with packed.bf16_products(True):
        loss = fused_loss.linear_cross_entropy(lin(x).reshape(74, 12), out_weight, None, target, 0.1)
        loss.backward()
    monkeypatch.undo()
    assert len(seen) == 6  # forward, d x and d W of both products
    assert all(74 not in dims and 128 in dims for dims in seen), seen
    assert x.grad is not None and lin.weight.grad is not None and out_weight.grad is not None
