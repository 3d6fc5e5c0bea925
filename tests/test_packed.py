"""kernels/packed.py: float32 products through oneDNN's packed weights, or a plain product for
small ones (one or two rows, or few multiply-adds); the same function either way."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnmt.kernels import cache, packed


@pytest.mark.parametrize("few_rows", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, 64])
@pytest.mark.parametrize("shape", [(24, 16), (1100, 1000)])  # below and above SMALL_PRODUCT
def test_linear_and_linear_add_equal_the_plain_product(rows, shape, few_rows):
    g = torch.Generator().manual_seed(rows)
    out_dim, in_dim = shape
    weight = torch.randn(out_dim, in_dim, generator=g)
    bias = torch.randn(out_dim, generator=g)
    x = torch.randn(rows, in_dim, generator=g)
    other = torch.randn(rows, out_dim, generator=g)
    w = packed.pack(weight, 320, few_rows=few_rows)
    torch.testing.assert_close(w.weight, weight, rtol=0, atol=0)
    torch.testing.assert_close(packed.linear(x, w, bias), F.linear(x, weight, bias),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed.linear(x, w), x @ weight.t(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed.linear_add(x, w, other), x @ weight.t() + other,
                               rtol=1e-4, atol=1e-4)
    x3 = x.view(rows, 1, in_dim)  # the attentional layer's (B, 1, ·) input
    torch.testing.assert_close(packed.linear(x3, w, bias), F.linear(x3, weight, bias),
                               rtol=1e-4, atol=1e-4)


def test_small_products_skip_onednn(monkeypatch):
    """One row (a greedy search step at batch 1) or a few multiply-adds take the plain product,
    many rows of a large weight the packed one (when oneDNN is there)."""
    calls = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *a: calls.append(a[0].shape) or linear(*a))
    big = packed.pack(torch.randn(1100, 1000), 320)
    small = packed.pack(torch.randn(24, 16), 320)
    packed.linear(torch.randn(1, 1000), big)
    packed.linear(torch.randn(2, 1000), big)
    packed.linear(torch.randn(40, 16), small)
    assert calls == [(1, 1000), (2, 1000), (40, 16)]
    packed.linear(torch.randn(64, 1000), big)
    assert len(calls) == (3 if big.packed is not None else 4)


def test_few_rows_keeps_the_plain_weight_transposed():
    """``pack(few_rows=True)`` (the search's weights) keeps the plain float32 weight as a view
    of an (in, out) contiguous copy, the layout one-row products read fastest, and leaves the
    caller's weight alone; without it, or for bfloat16 products, the weight itself is kept."""
    weight = torch.randn(30, 20)
    few = packed.pack(weight, 320, few_rows=True)
    if few.packed is not None:  # oneDNN there (the CPU builds of torch)
        assert few.weight.t().is_contiguous() and few.weight.data_ptr() != weight.data_ptr()
    assert weight.is_contiguous()
    assert packed.pack(weight, 320).weight.data_ptr() == weight.data_ptr()
    assert packed.pack(weight, 320, bf16=True, few_rows=True).weight.data_ptr() == weight.data_ptr()


def _packed_linear(bias: bool = True) -> packed.PackedLinear:
    torch.manual_seed(0)
    return packed.PackedLinear(64, 300, bias=bias).eval()


@pytest.mark.parametrize("rows", [1, 2, 5, 400])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_without_autograd_is_nn_linear_up_to_rounding(rows, bias):
    lin = _packed_linear(bias)
    x = torch.randn(rows, 1, 64)
    with torch.no_grad():
        got = lin(x)
    want = torch.nn.functional.linear(x, lin.weight, lin.bias)
    assert got.shape == want.shape == (rows, 1, 300)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_packed_linear_with_autograd_is_nn_linear():
    lin = _packed_linear()
    x = torch.randn(3, 64, requires_grad=True)
    lin(x).square().sum().backward()
    assert lin.weight.grad is not None and x.grad is not None
    assert not cache.held(lin, "packed_weight")  # no packed copy made for training


def test_packed_linear_follows_its_weight():
    """The packed copy is rebuilt after an in-place update (the version counter moves) and after
    the module enters and leaves training (fused Adam updates without moving it: simulated
    here through .data, which has its own counter)."""
    lin = _packed_linear()
    x = torch.randn(2, 64)
    with torch.no_grad():
        before = lin(x)
        lin.weight.mul_(2)
        torch.testing.assert_close(lin(x) - lin.bias, 2 * (before - lin.bias), rtol=1e-5, atol=1e-5)
        lin.weight.data.add_(1.0)  # no version bump: the stale copy would still be used
    lin.train().eval()
    with torch.no_grad():
        torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias),
                                   rtol=1e-5, atol=1e-5)


def test_packed_linear_trains_on_bfloat16_operands_under_bf16_products():
    """With autograd and bf16 products on (train.amp on a CPU with bfloat16 units), the product
    and its gradients are those of the operands' bfloat16 roundings; off, it is nn.Linear's."""
    lin = _packed_linear()
    x = torch.randn(4, 64, requires_grad=True)
    with packed.bf16_products(True):
        y = lin(x)
    rounded = F.linear(x.detach().to(torch.bfloat16).float(), lin.weight.detach().to(torch.bfloat16).float(),
                       lin.bias.detach())
    torch.testing.assert_close(y.detach(), rounded, rtol=2**-7, atol=1e-3)
    assert not torch.allclose(y.detach(), F.linear(x.detach(), lin.weight.detach(), lin.bias.detach()),
                              rtol=1e-6, atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and lin.weight.grad is not None and lin.bias.grad is not None
    torch.testing.assert_close(lin(x).detach(), F.linear(x.detach(), lin.weight.detach(), lin.bias.detach()))


def test_attention_products_take_bfloat16_operands_under_bf16_products():
    """packed.matmul (attention's scores and contexts in training): with bf16 products on, the
    batched product and its gradients of the operands' bfloat16 roundings, float32 out; off, a @ b."""
    torch.manual_seed(0)
    a = torch.randn(6, 5, 16, requires_grad=True)
    b = torch.randn(6, 16, 7, requires_grad=True)
    with packed.bf16_products(True):
        y = packed.matmul(a, b)
    assert y.dtype == torch.float32
    rounded = a.detach().to(torch.bfloat16).float() @ b.detach().to(torch.bfloat16).float()
    torch.testing.assert_close(y.detach(), rounded, rtol=2**-7, atol=1e-2)
    assert not torch.allclose(y.detach(), a.detach() @ b.detach(), rtol=1e-6, atol=1e-6)
    g = torch.randn(6, 5, 7)
    y.backward(g)
    torch.testing.assert_close(a.grad, g @ b.detach().transpose(1, 2), rtol=2**-6, atol=5e-2)
    torch.testing.assert_close(b.grad, a.detach().transpose(1, 2) @ g, rtol=2**-6, atol=5e-2)
    assert torch.equal(packed.matmul(a, b), a @ b)


def test_window_attention_trains_under_bf16_products_close_to_float32():
    """A window variant's attention (scores, pointers, local scores, contexts through
    packed.matmul) under bf16 products: outputs near float32's, gradients reach every parameter."""
    from attnmt.attention.multihead import MultiHeadAttention
    from attnmt.attention.window import WindowOptions

    torch.manual_seed(1)
    attn = MultiHeadAttention(32, 4, variant="window-add", options=WindowOptions("add", 2)).train()
    x = torch.randn(3, 7, 32)
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2, [True] * 3 + [False] * 4])
    ref, _ = attn(x, attn.project_keys(x), mask)
    with packed.bf16_products(True):
        out, _ = attn(x, attn.project_keys(x), mask)
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.05)
    assert not torch.equal(out, ref)
    out.pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in attn.parameters())


def test_products_leave_operand_only_maps_in_bfloat16_under_bf16_products():
    """products(low=2) with autograd: the first map's result as ``product`` makes it (float32),
    the last two in bfloat16 with their bias added there; the gradients those of the operands'
    bfloat16 roundings. Off (float32 training), ``low`` changes nothing."""
    torch.manual_seed(0)
    lins = [packed.PackedLinear(16, n) for n in (8, 6, 4)]
    with torch.no_grad():
        for lin in lins:
            lin.bias.uniform_(-1, 1)
    x = torch.randn(3, 5, 16, requires_grad=True)
    with packed.bf16_products(True):
        outs = packed.products(x, lins, low=2)
        first = packed.product(x, lins[0].weight, lins[0].bias)
    assert [o.dtype for o in outs] == [torch.float32, torch.bfloat16, torch.bfloat16]
    torch.testing.assert_close(outs[0], first, rtol=1e-6, atol=1e-6)
    xb = x.detach().to(torch.bfloat16)
    for out, lin in zip(outs[1:], lins[1:]):
        want = F.linear(xb, lin.weight.detach().to(torch.bfloat16)) + lin.bias.detach().to(torch.bfloat16)
        torch.testing.assert_close(out.float(), want.float(), rtol=2**-7, atol=1e-2)
    grads = [torch.randn(o.shape) for o in outs]
    sum((o.float() * g).sum() for o, g in zip(outs, grads)).backward()
    xr = x.detach().to(torch.bfloat16).float()
    for lin, g in zip(lins, grads):
        torch.testing.assert_close(lin.weight.grad, g.flatten(0, 1).t() @ xr.flatten(0, 1), rtol=2**-6, atol=5e-2)
        torch.testing.assert_close(lin.bias.grad, g.sum((0, 1)), rtol=2**-6, atol=5e-2)
    want_x = sum(g @ lin.weight.detach().to(torch.bfloat16).float() for lin, g in zip(lins, grads))
    torch.testing.assert_close(x.grad, want_x, rtol=2**-6, atol=5e-2)
    plain = packed.products(x, lins, low=2)  # bf16 products off: float32 throughout
    assert all(o.dtype == torch.float32 for o in plain)
    for out, lin in zip(plain, lins):
        torch.testing.assert_close(out, F.linear(x, lin.weight, lin.bias))


@pytest.mark.skipif(not packed._MKLDNN or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                    reason="oneDNN's bfloat16 products")
@pytest.mark.parametrize("rows", [5, 16, 35, 600, 1030])  # a few rows, a multiple, padded, an encoder's
def test_linear_low_pads_rows_and_returns_each_rows_product(rows):
    """A search's bfloat16 product rounds its rows up (SEARCH_ROWS, 8× that from 512 rows) for
    oneDNN's compiled kernel: each row's result is the one it has alone in a block, in x's shape."""
    g = torch.Generator().manual_seed(rows)
    weight, bias = torch.randn(48, 32, generator=g), torch.randn(48, generator=g)
    w = packed.pack(weight, 320, True, bias=bias)
    x = torch.randn(rows, 1, 32, generator=g)
    out = packed.linear_low(x, w, bias)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 1, 48)
    want = F.linear(x.to(torch.bfloat16).float(), weight.to(torch.bfloat16).float(), bias.to(torch.bfloat16).float())
    torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=2e-2)
    # rows are independent of the block they are multiplied in
    torch.testing.assert_close(packed.linear_low(x[:3], w, bias).float(), out[:3].float(), rtol=2**-7, atol=1e-2)
