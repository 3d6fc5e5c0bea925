"""packed.products (one product of stacked weights, the attention's [W_k; W_v]) against the
maps one by one: outputs and every gradient, float32 and with bf16 products; parameter names
(checkpoints, the CTranslate2 export) unchanged."""

import pytest
import torch

from attnmt.attention.multihead import MultiHeadAttention
from attnmt.kernels import cache, packed
from attnmt.kernels.packed import PackedLinear


def _grads(fn, params, x):
    for p in params:
        p.grad = None
    x.grad = None
    outs = fn()
    sum((o * torch.arange(o.numel()).view(o.shape).sin()).sum() for o in outs).backward()
    return [o.detach() for o in outs], [p.grad.clone() for p in params] + [x.grad.clone()]


@pytest.mark.parametrize("bf16", [False, True])
def test_products_equal_the_maps_one_by_one(bf16):
    if bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("oneDNN without bfloat16 on this CPU")
    torch.manual_seed(0)
    a, b = PackedLinear(24, 16), PackedLinear(24, 8)
    params = [a.weight, a.bias, b.weight, b.bias]
    x = torch.randn(3, 5, 24, requires_grad=True)
    with packed.bf16_products(bf16):
        want = _grads(lambda: [a(x), b(x)], params, x)
        got = _grads(lambda: packed.products(x, (a, b)), params, x)
    tol = dict(atol=2e-2, rtol=2e-2) if bf16 else dict(atol=1e-5, rtol=1e-5)
    for w, g in zip(want[0] + want[1], got[0] + got[1]):
        torch.testing.assert_close(g, w, **tol)


def test_no_grad_and_plain_linears_take_the_maps_one_by_one():
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 2)
    x = torch.randn(2, 4)
    got = packed.products(x, (a, b))
    assert [t.shape[-1] for t in got] == [3, 2]
    with torch.no_grad():
        c, d = PackedLinear(4, 3), PackedLinear(4, 2)
        torch.testing.assert_close(packed.products(x, (c, d))[0], c(x))


def test_attention_keys_keep_their_parameter_names():
    attn = MultiHeadAttention(16, 4, linear=PackedLinear)
    names = set(attn.state_dict())
    assert {"k.weight", "k.bias", "v.weight", "v.bias", "q.weight", "o.weight"} <= names
    x = torch.randn(2, 3, 16)
    keys = attn.project_keys(x)
    torch.testing.assert_close(keys["k"], attn._split(attn.k(x)))
    torch.testing.assert_close(keys["v"], attn._split(attn.v(x)))


def test_self_attention_queries_keys_values_in_one_product():
    torch.manual_seed(1)
    attn = MultiHeadAttention(16, 4, linear=PackedLinear)
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    params = list(attn.parameters())

    def fused():
        q, keys, given = attn.project_self(x)
        assert given == {}  # standard attention: no maps of its own
        return [attn(x, keys, mask, True, 0, False, None, q, given)[0]]

    def apart():
        return [attn(x, attn.project_keys(x), mask, True, 0)[0]]

    want, got = _grads(apart, params, x), _grads(fused, params, x)
    for w, g in zip(want[0] + want[1], got[0] + got[1]):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # search: the queries from the same one (packed) product
        q, keys, _ = attn.project_self(x)
        assert set(keys) == {"k", "v"}
        torch.testing.assert_close(q, attn._split(attn.q(x)), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(attn(x, keys, mask, True, 0, False, None, q)[0],
                                   attn(x, attn.project_keys(x), mask, True, 0)[0], atol=1e-5, rtol=1e-5)


def _search_maps(bf16: bool, rows: int = 320):
    torch.manual_seed(2)
    maps = [PackedLinear(32, 32) for _ in range(3)]
    for lin in maps:
        lin.bf16_search = bf16
    return maps, torch.randn(rows, 32)


@pytest.mark.parametrize("bf16", [False, True])
def test_search_products_stack_the_packed_maps(bf16):
    if bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("oneDNN without bfloat16 on this CPU")
    maps, x = _search_maps(bf16)
    with torch.no_grad():
        got = packed.products(x, maps)
        want = [lin(x) for lin in maps]
        tol = dict(atol=1e-2, rtol=1e-2) if bf16 else dict(atol=1e-5, rtol=1e-5)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tol)
        assert cache.held(maps[0], "stacked_3")  # packed once, kept on the first map
        maps[1].weight.mul_(2)  # made again when a weight changes in place
        torch.testing.assert_close(packed.products(x, maps)[1], maps[1](x), **tol)


def test_search_products_of_maps_in_other_precisions_go_one_by_one():
    maps, x = _search_maps(False)
    maps[2].int8_search = True  # translate --int8 on one of them: not stackable
    with torch.no_grad():
        got = packed.products(x, maps)
        assert not cache.held(maps[0], "stacked_3")
        torch.testing.assert_close(got[0], maps[0](x))
        torch.testing.assert_close(got[2], maps[2](x))  # its own (int8) product


def test_feed_forward_chain_in_a_bf16_search_gives_the_same_numbers():
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("oneDNN without bfloat16 on this CPU")
    from attnmt.models.transformer import FeedForward

    torch.manual_seed(3)
    ff = FeedForward(32, 64, 0.1).eval()
    x = torch.randn(320, 32)
    with torch.no_grad():
        assert packed.relu_chain(x, ff.w1, ff.w2) is None  # float32 search: the maps one by one
        for lin in (ff.w1, ff.w2):
            lin.bias.uniform_(-1, 1)
            lin.bf16_search = True
        want = ff.w2(torch.relu(ff.w1(x)))
        got = packed.relu_chain(x, ff.w1, ff.w2)
        assert got is not None and got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        torch.testing.assert_close(ff(x), want, atol=0, rtol=0)
        ff.w2.int8_search = True
        assert packed.relu_chain(x, ff.w1, ff.w2) is None
    assert packed.relu_chain(x, ff.w1, ff.w2) is None  # with autograd: training's path
