"""kernels/dropout.py against its definition F.dropout: the drop rate, outputs and gradients
through the same mask, reproducibility from torch's seed, and the attention weights' dropout."""

import math

import torch
import torch.nn.functional as F

from attnmt.attention.multihead import MultiHeadAttention
from attnmt.kernels import dropout as kd


def test_drop_rate_is_p_within_its_rounding():
    torch.manual_seed(0)
    n, p = 1 << 22, 0.1
    exact = round(p * 65536) / 65536
    assert abs(exact - p) < 1e-4
    rate = kd.drop_mask((n,), p).float().mean().item()
    assert abs(rate - exact) < 6 * math.sqrt(p * (1 - p) / n)
    # the four 16-bit pieces of each draw are each fair
    m = kd.drop_mask((n // 4, 4), 0.5).float().mean(0)
    assert torch.all((m - 0.5).abs() < 6 * math.sqrt(0.25 / (n // 4)))


def test_masks_follow_torch_seed():
    torch.manual_seed(3)
    a = kd.drop_mask((1000,), 0.3)
    torch.manual_seed(3)
    b = kd.drop_mask((1000,), 0.3)
    c = kd.drop_mask((1000,), 0.3)
    assert torch.equal(a, b) and not torch.equal(b, c)


def _mask_of(fn, shape, p, seed):
    torch.manual_seed(seed)
    out = fn()
    torch.manual_seed(seed)
    return out, kd.drop_mask(shape, p)


def test_dropout_is_the_definition_with_its_mask():
    p, x = 0.2, torch.randn(7, 33, requires_grad=True)
    g = torch.randn(7, 33)
    y, drop = _mask_of(lambda: kd.dropout(x, p, True), x.shape, p, 1)
    keep = (~drop).float() / (1 - p)
    torch.testing.assert_close(y, x.detach() * keep)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * keep)
    assert 0 < drop.float().mean() < 0.5


def test_dropout_add_is_residual_plus_dropout():
    p = 0.1
    res = torch.randn(4, 5, 16, requires_grad=True)
    x = torch.randn(4, 5, 16, requires_grad=True)
    g = torch.randn(4, 5, 16)
    y, drop = _mask_of(lambda: kd.dropout_add(res, x, p, True), x.shape, p, 2)
    keep = (~drop).float() / (1 - p)
    torch.testing.assert_close(y, res.detach() + x.detach() * keep)
    y.backward(g)
    torch.testing.assert_close(res.grad, g)
    torch.testing.assert_close(x.grad, g * keep)


def test_relu_dropout_is_dropout_of_relu():
    p = 0.1
    x = torch.randn(6, 40, requires_grad=True)
    with torch.no_grad():
        x[0, :4] = 0.0  # relu's gradient at 0 is 0
    g = torch.randn(6, 40)
    y, drop = _mask_of(lambda: kd.relu_dropout(x, p, True), x.shape, p, 4)
    keep = (~drop).float() / (1 - p)
    ref_x = x.detach().clone().requires_grad_()
    ref = F.relu(ref_x) * keep
    torch.testing.assert_close(y, ref.detach())
    y.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x.grad, ref_x.grad)


def test_not_training_or_p_zero_is_identity():
    x = torch.randn(3, 8)
    assert torch.equal(kd.dropout(x, 0.1, False), x)
    assert torch.equal(kd.dropout_add(x, x, 0.1, False), x + x)
    assert torch.equal(kd.relu_dropout(x, 0.0, True), F.relu(x))


def test_attention_weight_dropout_is_the_definition():
    """Training on the CPU with dropout: the explicit path (SDPA would run its math path) with
    the kernel's mask on the weights, equal to softmax(QKᵀ/√d) masked and scaled, times V."""
    torch.manual_seed(0)
    p = 0.25
    attn = MultiHeadAttention(32, 4, dropout=p).train()
    x = torch.randn(3, 6, 32)
    mem = torch.randn(3, 5, 32)
    key_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
    keys = attn.project_keys(mem)
    out, drop = _mask_of(lambda: attn(x, keys, key_mask)[0], (3, 4, 6, 5), p, 9)
    q = attn._split(attn.q(x))
    scores = (q @ keys["k"].transpose(-1, -2)) / math.sqrt(8)
    w = torch.softmax(scores.masked_fill(~key_mask[:, None, None, :], float("-inf")), -1)
    ref = attn.o(attn._merge((w * (~drop).float() / (1 - p)) @ keys["v"]))
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert attn.q.weight.grad is not None and attn.q.weight.grad.abs().sum() > 0


def test_attention_kernel_equals_the_definitions_steps():
    """kernels/attention_dropout (the mask as an additive bias joined with the scale) against
    MultiHeadAttention's own steps (need_weights=True takes them), same dropout masks: outputs
    and gradients, key mask and causal."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(32, 4, dropout=0.2).train()
    x = torch.randn(3, 6, 32, requires_grad=True)
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 2 + [False] * 4])
    for causal in (False, True):
        results = []
        for need_weights in (False, True):
            attn.zero_grad()
            x.grad = None
            torch.manual_seed(5)
            out = attn(x, attn.project_keys(x), key_mask, causal, 0, need_weights)[0]
            out.pow(2).sum().backward()
            results.append([out.detach(), x.grad.clone()] + [p.grad.clone() for p in attn.parameters()])
        for fast, ref in zip(*results):
            torch.testing.assert_close(fast, ref, atol=1e-6, rtol=1e-5)
