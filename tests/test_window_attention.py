"""Differentiable window attention: pointers, combiners, baselines, Transformer use (the soft
masks themselves: test_window_mask.py)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from tensor_probes import LargestTensor

from attnmt.attention.localness import GaussianLocalness
from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.relative import RelativeOptions, RelativePositions
from attnmt.attention.window import BoundaryPointers, soft_window_mask, window_options
from attnmt.config import Config, ModelConfig
from attnmt.kernels import cache
from attnmt.models import build_model
from attnmt.models.transformer import set_variants

WINDOWS = ("window-mul", "window-add", "window-mul-seg", "window-add-seg")


def _one_hot(n, i):
    return torch.nn.functional.one_hot(torch.tensor(i), n).float()


def test_pointers_exclude_padding_and_future():
    torch.manual_seed(0)
    ptr = BoundaryPointers(heads=2, head_dim=4)
    q, k = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    allowed = key_mask[:, None, None, :] & causal[None, None]
    phi = ptr(q, k, allowed).movedim(2, 0)  # (2, B, H, T, S)
    assert torch.all(phi[:, ~allowed.expand(2, 2, 5, 5)] == 0)
    torch.testing.assert_close(phi.sum(-1), torch.ones(2, 2, 2, 5))


def test_pointers_match_the_bilinear_definition_with_gradients():
    """φ̂_side = softmax(q W_side (k W'_side)ᵀ τ) per head, computed naively, against the folded
    q (W W'ᵀ) kᵀ form; values and gradients wrt q, k, W, W' agree."""
    torch.manual_seed(0)
    H, d, T, S = 3, 4, 5, 6
    ptr = BoundaryPointers(heads=H, head_dim=d).double()
    q = torch.randn(2, H, T, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, H, S, d, dtype=torch.float64, requires_grad=True)
    allowed = torch.tensor([[True] * S, [True] * 4 + [False] * 2])[:, None, None, :]
    weight = torch.randn(2, 2, H, T, S, dtype=torch.float64)
    got = ptr(q, k, allowed).movedim(2, 0)  # (2, B, H, T, S): left, right
    want = []
    for side in range(2):
        rows = []
        for h in range(H):
            wq, wk = ptr.w_query[h, :, side * d : (side + 1) * d], ptr.w_key[h, :, side * d : (side + 1) * d]
            scores = (q[:, h] @ wq) @ (k[:, h] @ wk).transpose(-1, -2) * ptr.tau
            rows.append(torch.softmax(scores.masked_fill(~allowed[:, 0], float("-inf")), -1))
        want.append(torch.stack(rows, 1))
    want = torch.stack(want)
    torch.testing.assert_close(got, want)
    params = (q, k, ptr.w_query, ptr.w_key)
    for a, b in zip(torch.autograd.grad((got * weight).sum(), params), torch.autograd.grad((want * weight).sum(), params)):
        torch.testing.assert_close(a, b)


def _attention(variant, d=16, heads=4, segment=2):
    return MultiHeadAttention(d, heads, 0.0, variant, window_options(variant, segment, "exact", False, 0.0))


@pytest.mark.parametrize("variant", WINDOWS)
def test_gradients_reach_the_pointer_projections(variant):
    torch.manual_seed(0)
    att = _attention(variant)
    x = torch.randn(2, 7, 16)
    out, _ = att(x, att.project_keys(x), torch.ones(2, 7, dtype=torch.bool))
    out.pow(2).sum().backward()
    for p in (att.pointers.w_query, att.pointers.w_key):
        assert p.grad is not None and p.grad.abs().sum() > 0
    if variant.startswith("window-add"):
        assert att.local_q.weight.grad.abs().sum() > 0


def test_multiplicative_window_with_a_full_span_is_standard_attention(monkeypatch):
    # Equal to float32 rounding, not bit for bit: the window's scores come out of one product with
    # its pointers' scores (3T rows of q), and a BLAS may block 3T rows differently from T (AMX does).
    torch.manual_seed(0)
    att = _attention("window-mul")
    x = torch.randn(2, 6, 16)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    keys = att.project_keys(x)
    att.use_variant = False
    _, plain = att(x, keys, mask, need_weights=True)
    att.use_variant = True

    def full_span(q, pointer_keys, allowed, scores=None):  # l = first key, r = last real key
        B, H, T, _ = q.shape
        n = allowed.size(-1)
        last = mask.sum(-1) - 1
        phi_l = torch.zeros(B, H, T, n)
        phi_l[..., 0] = 1
        phi_r = torch.nn.functional.one_hot(last, n).float()[:, None, None, :].expand(B, H, T, n)
        return torch.stack((phi_l, phi_r), 2)

    monkeypatch.setattr(att.pointers, "forward", full_span)
    _, windowed = att(x, keys, mask, need_weights=True)
    torch.testing.assert_close(windowed, plain, rtol=1e-6, atol=1e-7)
    assert torch.equal(windowed == 0, plain == 0)  # the padding's columns exactly zero in both


@pytest.mark.parametrize("variant", WINDOWS + ("relative", "localness"))
def test_disabled_variant_is_the_plain_transformer_bit_for_bit(variant):
    cfg = _tiny_cfg()
    torch.manual_seed(0)
    plain = build_model(cfg, 30, 31).eval()
    cfg.model.enc_self_attention = cfg.model.dec_self_attention = variant
    cfg.model.cross_attention = "standard" if variant == "relative" else variant
    model = build_model(cfg, 30, 31).eval()
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing  # only the variant's own parameters are new
    src, lengths, tgt = _batch()
    with torch.no_grad():
        want, want_w = plain(src, lengths, tgt, need_weights=True)
        got_on, _ = model(src, lengths, tgt, need_weights=True)
        set_variants(model, False)
        got, got_w = model(src, lengths, tgt, need_weights=True)
    assert torch.equal(got, want) and torch.equal(got_w, want_w)
    assert not torch.allclose(got_on, want)  # and the variant does change the model when on


def _tiny_cfg(task="translate"):
    cfg = Config(model=ModelConfig(type="transformer"))
    cfg.task = task
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 4, 32, 0.0
    m.window_segment = 2
    return cfg


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 30, (3, 8), generator=g)
    lengths = torch.tensor([8, 5, 2])
    src[1, 5:] = 0
    src[2, 2:] = 0
    tgt = torch.randint(4, 31, (3, 7), generator=g)
    tgt[:, 0] = 2
    return src, lengths, tgt


@pytest.mark.parametrize("variant", WINDOWS + ("relative", "localness"))
@pytest.mark.parametrize("task", ["translate", "lm"])
def test_decoder_self_attention_never_sees_the_future(variant, task):
    cfg = _tiny_cfg(task)
    cfg.model.dec_self_attention = variant
    cfg.model.cross_attention = variant if variant != "relative" else "standard"
    torch.manual_seed(1)
    model = build_model(cfg, 30, 31).eval()
    src, lengths, tgt = _batch()
    if task == "lm":
        src, lengths = src[:, :0], torch.zeros(3, dtype=torch.long)
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, 31, (3, 3))
    with torch.no_grad():
        a, _ = model(src, lengths, tgt)
        b, _ = model(src, lengths, changed)
    assert torch.equal(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_relative_positions_match_the_pairwise_definition():
    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, 0.0, "relative", RelativeOptions(clip=2))
    x = torch.randn(1, 5, 8)
    out, w = att(x, att.project_keys(x), need_weights=True)
    q, k, v = att._split(att.q(x)), att._split(att.k(x)), att._split(att.v(x))
    rel: RelativePositions = att.relative
    ref_out = torch.zeros(1, 2, 5, 4)
    for i in range(5):
        a_k = torch.stack([rel.key.weight[max(-2, min(2, j - i)) + 2] for j in range(5)])  # (S, d)
        a_v = torch.stack([rel.value.weight[max(-2, min(2, j - i)) + 2] for j in range(5)])
        e = ((q[0, :, i : i + 1] * (k[0] + a_k)).sum(-1)) * att.scale  # (H, S)
        alpha = torch.softmax(e, -1)
        torch.testing.assert_close(w[0, :, i], alpha)
        ref_out[0, :, i] = (alpha.unsqueeze(1) @ v[0]).squeeze(1) + alpha @ a_v
    torch.testing.assert_close(out, att.o(att._merge(ref_out)))


def test_localness_adds_the_gaussian_bias():
    torch.manual_seed(0)
    loc = GaussianLocalness(heads=2, head_dim=4)
    q = torch.randn(1, 2, 3, 4)
    visible = torch.full((1, 1, 3, 1), 6.0)
    centre, sigma = loc.centre_and_sigma(q, visible)
    bias = loc.bias(q, visible, 6)
    assert torch.all((centre >= 0) & (centre <= 5)) and torch.all(sigma >= 0.5)
    j = torch.arange(6.0)
    torch.testing.assert_close(bias, -((j - centre) ** 2) / (2 * sigma**2))
    assert torch.all(bias <= 0)
    # the bias peaks at the key nearest the predicted centre
    assert torch.equal(bias.argmax(-1), (j - centre).abs().argmin(-1))


@pytest.mark.parametrize("variant", WINDOWS)
def test_no_cubic_tensors(variant):
    att = _attention(variant, d=8, heads=2, segment=3)
    n = 40
    x = torch.randn(1, n, 8)
    with LargestTensor() as probe:
        att(x, att.project_keys(x), need_weights=True)
    # 2 heads × (the scores and both pointers' scores, one product): n² per row, never n³
    assert probe.largest <= 2 * 3 * n * n


# ---------------------------------------------------------------- window statistics (analyse window-stats)


def test_window_statistics_of_exact_three_token_windows():
    from attnmt.eval.windows import window_statistics

    S = 8
    phi_l = _one_hot(S, [max(i - 1, 0) for i in range(S)])[None, None]  # (1, 1, T, S)
    phi_r = _one_hot(S, [min(i + 1, S - 1) for i in range(S)])[None, None]
    layer = {"phi_l": phi_l, "phi_r": phi_r, "mask": soft_window_mask(phi_l[0], phi_r[0])[None],
             "attn": torch.full((1, 1, S, S), 1.0 / S)}
    stats = window_statistics(layer, "encoder self")
    widths = [2, 3, 3, 3, 3, 3, 3, 2]  # the window [i-1, i+1] clipped at the edges
    assert stats["queries"] == S
    assert stats["width"] / S == pytest.approx(sum(widths) / S / S)
    assert stats["hard_width"] / S == pytest.approx(sum(widths) / S / S)
    assert stats["offset"] / S == pytest.approx(2 * 0.5 / S / S)  # only the clipped edges are off-centre
    assert stats["inside"] / S == pytest.approx(sum(widths) / S / S)  # uniform attention: its share = width
    halved = window_statistics({**layer, "attn": layer["attn"] / 2}, "encoder self")  # rows summing to 1/2
    assert halved["inside"] == pytest.approx(stats["inside"])
    assert window_statistics({"attn": layer["attn"]}, "encoder self") is None


def test_window_statistics_cross_attention_on_the_diagonal_has_no_offset():
    from attnmt.eval.windows import window_statistics

    T, S = 5, 9
    phi = _one_hot(S, [2 * i for i in range(T)])[None, None]  # i * (S - 1) / (T - 1) = 2i
    layer = {"phi_l": phi, "phi_r": phi, "mask": soft_window_mask(phi[0], phi[0])[None],
             "attn": phi.clone()}
    stats = window_statistics(layer, "cross")
    assert stats["offset"] == pytest.approx(0.0)
    assert stats["hard_width"] / T == pytest.approx(1 / S)
    assert stats["inside"] / T == pytest.approx(1.0)
    assert window_statistics(layer, "encoder self")["offset"] > 0  # same windows, read as self-attention


def test_position_blind_pointers_give_a_third_of_the_sentence():
    """The reference numbers quoted by `analyse window-stats`: uniform pointers, width ≈ 1/3, offset ≈ 1/4."""
    from attnmt.eval.windows import window_statistics

    S = 90
    phi = torch.full((1, 2, S, S), 1.0 / S)
    layer = {"phi_l": phi, "phi_r": phi, "mask": soft_window_mask(phi[0], phi[0])[None], "attn": phi}
    stats = window_statistics(layer, "encoder self")
    assert stats["width"] / stats["queries"] == pytest.approx(1 / 3, abs=0.02)
    assert stats["offset"] / stats["queries"] == pytest.approx(1 / 4, abs=0.02)


def test_full_mask_ablation_keeps_the_combiner_and_drops_the_window():
    """window_mask="full" (M ≡ 1): window-mul is plain attention, window-add is
    softmax(QKᵀ/√d + Q_L K_Lᵀ/√d), and the pointers play no part."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    allowed = torch.ones(2, 6, dtype=torch.bool)
    mul = MultiHeadAttention(16, 4, 0.0, "window-mul", window_options("window-mul", 0, "full", False, 0.0))
    keys = mul.project_keys(x)
    _, windowless = mul(x, keys, allowed, need_weights=True)
    mul.use_variant = False
    _, plain = mul(x, keys, allowed, need_weights=True)
    torch.testing.assert_close(windowless, plain)

    add = MultiHeadAttention(16, 4, 0.0, "window-add", window_options("window-add", 0, "full", False, 0.0))
    keys = add.project_keys(x)
    _, before = add(x, keys, allowed, need_weights=True)
    with torch.no_grad():
        add.pointers.w_query.mul_(3.0)  # pointers are unused: nothing changes
    _, after = add(x, keys, allowed, need_weights=True)
    torch.testing.assert_close(before, after)
    add.use_variant = False
    _, plain = add(x, keys, allowed, need_weights=True)
    assert not torch.allclose(before, plain)  # the local projections still add their scores


# ---------------------------------------------------------------- stacked self-attention products


def _packed_window(variant, preset=False):
    """A window attention with the Transformer's PackedLinear maps and non-zero biases (a bias
    that lands in the wrong slice of a stacked product would show)."""
    from attnmt.attention.window import PRESETS
    from attnmt.kernels.packed import PackedLinear

    if preset:
        paper = PRESETS["paper"]
        opts = window_options(variant, paper["window_segment"], paper["window_mask"], False,
                              paper["window_temperature"], paper["window_pointers"])
    else:
        opts = window_options(variant, 2, "exact", False, 0.0)
    att = MultiHeadAttention(16, 4, 0.0, variant, opts, linear=PackedLinear)
    with torch.no_grad():
        for p in att.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.3)
    return att


STACKED = [("window-add", False), ("window-add-seg", False), ("window-add-seg", True), ("window-mul", True)]


@contextlib.contextmanager
def _one_by_one():
    """packed.products as the maps one by one: the definition the stacked product computes."""
    from attnmt.kernels import packed

    real = packed.products
    packed.products = lambda x, linears, low=0: [lin(x) for lin in linears]
    try:
        yield
    finally:
        packed.products = real


@pytest.mark.parametrize("variant,preset", STACKED)
def test_self_attention_stacks_the_window_maps_with_qkv(variant, preset):
    """project_self's one product of [W_q; W_k; W_v; Q_L; pointer queries; pointer keys; K_L]
    gives the output and every gradient of the maps one by one (float32 rounding only), and
    never calls the variant's maps apart."""
    from attnmt.kernels import packed

    torch.manual_seed(0)
    att = _packed_window(variant, preset)
    x = torch.randn(2, 7, 16, requires_grad=True)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    params = list(att.parameters())
    query_maps, key_maps = att.unit.maps(att)
    extra = [*query_maps.values(), *key_maps.values()]
    assert len(extra) == (2 if variant.startswith("window-add") else 0) + (2 if preset else 0)
    calls = []
    hooks = [lin.register_forward_hook(lambda *a: calls.append(1)) for lin in extra]

    def run(fn):
        for p in params:
            p.grad = None
        x.grad = None
        calls.clear()
        out = fn()
        (out * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        return out.detach(), [p.grad.clone() for p in params] + [x.grad.clone()], len(calls)

    def stacked():
        q, keys, given = att.project_self(x)
        assert set(given) == set(query_maps) and not set(given) & set(keys)  # queries are not cached
        return att(x, keys, mask, True, 0, False, None, q, given)[0]

    with _one_by_one():
        want, want_grads, apart = run(lambda: att(x, att.project_keys(x), mask, True)[0])
    got, got_grads, together = run(stacked)
    assert apart == len(extra) and together == 0  # the maps' products came from the one product
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    for h in hooks:
        h.remove()
    with torch.no_grad():  # a search: the stacked maps packed once, the same numbers
        q, keys, given = att.project_self(x)
        torch.testing.assert_close(att(x, keys, mask, True, 0, False, None, q, given)[0], want,
                                   atol=1e-5, rtol=1e-5)
        assert cache.held(att.q, f"stacked_{3 + len(extra)}") == bool(packed._MKLDNN)
        att.use_variant = False  # switched off: its keys still come (cached alike), no queries
        q, keys_off, given = att.project_self(x)
        assert given == {} and set(keys_off) == set(keys)


def test_input_pointers_take_the_attentions_linear_and_keep_checkpoint_names():
    """The paper preset's pointer maps are PackedLinear in the Transformer (bfloat16 products
    under train.amp like the other projections); a state dict of nn.Linear maps (checkpoints
    written before) loads strictly and gives the same output."""
    from attnmt.kernels import packed
    from attnmt.kernels.packed import PackedLinear

    att = _packed_window("window-add-seg", preset=True)
    assert type(att.pointers.query) is PackedLinear and type(att.pointers.key) is PackedLinear
    names = {"pointers.query.weight", "pointers.query.bias", "pointers.key.weight", "pointers.key.bias",
             "local_q.weight", "local_q.bias", "local_k.weight", "local_k.bias"}
    assert names <= set(att.state_dict())
    old = MultiHeadAttention(16, 4, 0.0, "window-add-seg", att.unit.options)  # nn.Linear maps
    assert type(old.pointers.query) is torch.nn.Linear and set(old.state_dict()) == set(att.state_dict())
    old.load_state_dict(att.state_dict())
    fresh = _packed_window("window-add-seg", preset=True)
    fresh.load_state_dict(old.state_dict())  # strict
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x, fresh.project_keys(x))[0], old(x, old.project_keys(x))[0],
                                   atol=1e-5, rtol=1e-5)
    with packed.bf16_products(True):  # the amp path: bfloat16 operands, float32 sums and bias
        want = torch.nn.functional.linear(x.bfloat16(), att.pointers.query.weight.bfloat16()).float()
        torch.testing.assert_close(att.pointers.query(x), want + att.pointers.query.bias)


def test_transformer_paper_preset_builds_packed_pointer_maps():
    from attnmt.attention.window import InputPointers
    from attnmt.config import apply_overrides
    from attnmt.kernels.packed import PackedLinear

    cfg = _tiny_cfg()
    cfg.model.enc_self_attention = cfg.model.cross_attention = "window-add-seg"
    cfg.model.window_preset = "paper"
    cfg.model.window_segment = 5
    model = build_model(apply_overrides(cfg, []), 30, 31)
    pointers = [m for m in model.modules() if isinstance(m, InputPointers)]
    assert pointers and all(type(p.query) is PackedLinear and type(p.key) is PackedLinear for p in pointers)


@pytest.mark.parametrize("variant,preset", STACKED)
def test_cross_attention_stacks_the_window_maps_with_k_v_and_with_q(variant, preset):
    """Cross-attention: [W_k; W_v; pointer keys; K_L] of the memory and [W_q; Q_L; pointer
    queries] of the queries, each one product (project_keys, project_queries): the output and
    every gradient of the maps one by one, the variant's maps never called apart."""
    torch.manual_seed(0)
    att = _packed_window(variant, preset)
    x = torch.randn(2, 5, 16, requires_grad=True)
    memory = torch.randn(2, 7, 16, requires_grad=True)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    params = list(att.parameters())
    query_maps, key_maps = att.unit.maps(att)
    calls = []
    hooks = [lin.register_forward_hook(lambda *a: calls.append(1))
             for lin in (*query_maps.values(), *key_maps.values())]

    def run():
        for t in (*params, x, memory):
            t.grad = None
        calls.clear()
        out = att(x, att.project_keys(memory), mask)[0]
        (out * torch.arange(out.numel()).view(out.shape).cos()).sum().backward()
        return out.detach(), [p.grad.clone() for p in params] + [x.grad.clone(), memory.grad.clone()], len(calls)

    with _one_by_one():
        want, want_grads, apart = run()
    got, got_grads, together = run()
    for h in hooks:
        h.remove()
    assert apart == len(query_maps) + len(key_maps) and together == 0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_bilinear_pointer_form_is_kept_without_autograd_and_follows_the_weights():
    torch.manual_seed(0)
    pointers = BoundaryPointers(2, 4)
    with torch.no_grad():
        kept = pointers.bilinear()
        assert pointers.bilinear() is kept and torch.equal(kept, pointers._bilinear())
        pointers.w_query.mul_(2)  # a new version of the weights: formed again
        assert torch.allclose(pointers.bilinear(), 2 * kept)
    with_grad = pointers.bilinear()  # with autograd: formed at every call, differentiable
    assert with_grad.requires_grad and with_grad is not pointers.bilinear()


@pytest.mark.parametrize("variant,preset", STACKED)
def test_stacked_window_maps_stay_bfloat16_under_bf16_products(variant, preset):
    """Under bf16 products (train.amp on the CPU) the window's maps come out of the stacked
    product in bfloat16 (Window.operand_maps) and the attention stays the maps-one-by-one
    attention's up to bfloat16 rounding, with gradients for every parameter."""
    from attnmt.kernels import packed

    torch.manual_seed(0)
    att = _packed_window(variant, preset)
    x = torch.randn(2, 7, 16)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    with packed.bf16_products(True):
        with _one_by_one():
            want = att(x, att.project_keys(x), mask, True)[0]
        q, keys, given = att.project_self(x)
        assert all(t.dtype == torch.bfloat16 for t in given.values())
        assert all(keys[name].dtype == torch.bfloat16 for name in att.unit.maps(att)[1])
        assert q.dtype == keys["k"].dtype == keys["v"].dtype == torch.float32
        got = att(x, keys, mask, True, 0, False, None, q, given)[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0.03, atol=0.03)
    got.pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in att.parameters())
