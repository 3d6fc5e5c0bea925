"""Local attention (local-m, local-p): window arithmetic, equivalences, gradients, real locality."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tensor_probes import LargestTensor

from attnmt.attention import GlobalAttention, LocalAttention, build_attention
from attnmt.config import ModelConfig
from attnmt.kernels import window_products
from attnmt.kernels.window_products import WindowDot, WindowSum
from attnmt.models.common import lengths_to_mask, select_batch
from attnmt.models.seq2seq import Seq2Seq

SCORES = ("dot", "general", "concat", "concat-simple")


def _inputs(B=3, S=9, T=12, d=8, lengths=(9, 5, 1), seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(B, S, d, generator=g)
    query = torch.randn(B, T, d, generator=g)
    mask = lengths_to_mask(torch.tensor(lengths), S)
    return query, values, mask


def _reference(att: LocalAttention, query, values, mask, positions):
    """Eq. 7/9/10 written out per (b, t) with Python loops over the truncated window."""
    B, T, _ = query.shape
    S = values.size(1)
    memory = att.prepare(values, mask)
    p = att.aligned_positions(query, memory, positions)
    context = torch.zeros(B, T, values.size(2))
    dense = torch.zeros(B, T, S)
    keys = att.score.keys(values)  # the textbook keys (W_a h̄_s for general)
    for b in range(B):
        n = int(mask[b].sum())
        for t in range(T):
            centre = min(math.floor(p[b, t].item()), n - 1)
            window = list(range(max(0, centre - att.window), min(n - 1, centre + att.window) + 1))
            score = att.score(query[b : b + 1, t : t + 1], keys[b : b + 1, window])[0, 0]
            gauss = torch.tensor(
                [-((s - p[b, t].item()) ** 2) / (2 * att.sigma**2) for s in window]
            )
            if att.gaussian and att.composition == "inside":
                a = torch.softmax(score + gauss, -1)
            else:
                a = torch.softmax(score, -1)
                if att.gaussian:
                    a = a * gauss.exp()
            context[b, t] = a @ values[b, window]
            dense[b, t, window] = a
    return context, dense


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("composition", ["paper", "inside"])
@pytest.mark.parametrize("score", SCORES)
def test_matches_reference_with_truncated_windows(mode, composition, score):
    torch.manual_seed(1)
    query, values, mask = _inputs()  # lengths 9, 5, 1 and 12 target steps: every boundary case
    sigma = 1.5 if mode == "local-m" else None  # local-m: exercise the optional Gaussian too
    att = LocalAttention(mode, score, 8, 8, window=2, sigma=sigma, composition=composition)
    positions = torch.arange(12)
    context, dense = att(query, att.prepare(values, mask), positions, need_weights=True)
    ref_context, ref_dense = _reference(att, query, values, mask, positions)
    torch.testing.assert_close(context, ref_context, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dense, ref_dense, rtol=1e-5, atol=1e-6)


def _training_path(att, query, values, mask, positions, memory=None):
    """Today's code with autograd on (the training path): the oracle of the decoding path."""
    with torch.enable_grad():
        memory = att.prepare(values, mask) if memory is None else memory
        context, dense = att(query, memory, positions, need_weights=True)
    return context.detach(), dense.detach()


def test_local_m_window_at_sentence_start_and_past_the_end():
    query, values, mask = _inputs(B=1, S=6, T=10, lengths=(6,))
    att = LocalAttention("local-m", "dot", 8, 8, window=2)
    _, w = att(query, att.prepare(values, mask), torch.arange(10))
    support = [set(torch.nonzero(w[0, t]).flatten().tolist()) for t in range(10)]
    assert support[0] == {0, 1, 2}  # [-2, 2] truncated at 0
    assert support[3] == {1, 2, 3, 4, 5}
    assert support[5] == {3, 4, 5}  # [3, 7] truncated at S
    assert all(s == {3, 4, 5} for s in support[6:])  # t >= S: centre stays on the last word
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 10))  # no Gaussian: a distribution


def test_local_p_window_near_both_ends():
    query, values, mask = _inputs(B=2, S=30, T=4, lengths=(30, 30))
    att = LocalAttention("local-p", "general", 8, 8, window=3)
    with torch.no_grad():  # v_pᵀ tanh(W_p h_t) ≈ ±big: p_t ≈ 0 for batch 0, ≈ S for batch 1
        att.W_p.weight.copy_(torch.eye(8) * 50)
        att.v_p.weight.fill_(5.0)
        query = query.abs()
        query[0] = -query[0]
    memory = att.prepare(values, mask)
    p = att.aligned_positions(query, memory, None)
    assert (p[0] < 0.01).all() and (p[1] > 29.99).all()
    _, w = att(query, memory, None)
    assert set(torch.nonzero(w[0, 0]).flatten().tolist()) == {0, 1, 2, 3}
    assert set(torch.nonzero(w[1, 0]).flatten().tolist()) == {26, 27, 28, 29}
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("score", SCORES)
def test_window_covering_sentence_without_gaussian_equals_global(mode, score):
    query, values, mask = _inputs()
    glob = GlobalAttention(score, 8, 8)
    loc = LocalAttention(mode, score, 8, 8, window=9, sigma=math.inf)  # D >= S
    loc.score.load_state_dict(glob.score.state_dict())
    c_g, w_g = glob(query, glob.prepare(values, mask), torch.arange(12))
    c_l, w_l = loc(query, loc.prepare(values, mask), torch.arange(12))
    torch.testing.assert_close(c_l, c_g, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w_l, w_g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("composition", ["paper", "inside"])
def test_gradient_reaches_position_predictor(composition):
    query, values, mask = _inputs()
    att = LocalAttention("local-p", "general", 8, 8, window=2, composition=composition)
    context, _ = att(query, att.prepare(values, mask), None, need_weights=False)
    context.pow(2).sum().backward()
    for param in (att.W_p.weight, att.v_p.weight, att.score.W_a.weight):
        assert param.grad is not None and param.grad.abs().sum() > 0


def test_padding_never_receives_weight():
    query, values, mask = _inputs(S=9, lengths=(9, 5, 1))
    for mode in ("local-m", "local-p"):
        att = LocalAttention(mode, "general", 8, 8, window=4)
        c1, w = att(query, att.prepare(values, mask), torch.arange(12))
        assert (w.masked_select(~mask.unsqueeze(1).expand_as(w)) == 0).all()
        noisy = values.masked_fill(~mask.unsqueeze(-1), 1e6)  # garbage in the padded slots
        c2, _ = att(query, att.prepare(noisy, mask), torch.arange(12))
        torch.testing.assert_close(c1, c2)


@pytest.mark.parametrize("chunk", [1 << 20, 7])  # one chunk; one window row per chunk
def test_window_products_gradcheck(monkeypatch, chunk):
    monkeypatch.setattr(window_products, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 9, (6, 4), generator=g)  # repeated rows: gradients must add up
    x = torch.randn(6, 5, dtype=torch.double, generator=g, requires_grad=True)
    table = torch.randn(9, 5, dtype=torch.double, generator=g, requires_grad=True)
    a = torch.randn(6, 4, dtype=torch.double, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, t: WindowDot.apply(x, t, rows), (x, table))
    assert torch.autograd.gradcheck(lambda a, t: WindowSum.apply(a, t, rows), (a, table))
    expected = (table[rows] * x.unsqueeze(1)).sum(-1)
    torch.testing.assert_close(WindowDot.apply(x, table, rows), expected)


@pytest.mark.parametrize("score", ["dot", "general"])
def test_backward_keeps_no_window_copies(score):
    """dot/general save only (T, W) and (T, d) tensors for backward, never (T, W, d) windows."""
    B, S, T, d, D = 2, 30, 40, 8, 5
    W = 2 * D + 1
    values = torch.randn(B, S, d, requires_grad=True)
    query = torch.randn(B, T, d, requires_grad=True)
    mask = torch.ones(B, S, dtype=torch.bool)
    att = LocalAttention("local-p", score, d, d, window=D)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        context, _ = att(query, att.prepare(values, mask), None, need_weights=False)
    context.sum().backward()
    assert saved and max(saved) < B * T * W * d // 4
    assert values.grad.abs().sum() > 0


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_no_tensor_grows_with_target_times_source(mode):
    B, S, T, d, D = 2, 1000, 40, 4, 3
    values = torch.randn(B, S, d, requires_grad=True)
    query = torch.randn(B, T, d, requires_grad=True)
    mask = torch.ones(B, S, dtype=torch.bool)
    att = LocalAttention(mode, "general", d, d, window=D)
    with LargestTensor() as probe:
        context, _ = att(query, att.prepare(values, mask), torch.arange(T), need_weights=False)
        context.sum().backward()
    # the biggest thing touched is dL/dh̄ (B, S, d), the size of the encoder states themselves;
    # a T×S score matrix would be B·T·S = 10x larger
    assert probe.largest <= B * S * d < B * T * S
    assert values.grad is not None and query.grad is not None


def test_build_attention_from_config():
    cfg = ModelConfig(hidden=8, embed=8, attention="local-p", score="general", window=4)
    att = build_attention(cfg, 8, 8)
    assert isinstance(att, LocalAttention) and att.sigma == 2.0 and att.composition == "paper"
    cfg.attention, cfg.sigma, cfg.local_composition = "local-m", 0.0, "inside"
    att = build_attention(cfg, 8, 8)
    assert att.mode == "local-m" and not att.gaussian and att.composition == "inside"
    cfg.sigma = 3.0
    assert build_attention(cfg, 8, 8).sigma == 3.0
    cfg.score = "location"
    with pytest.raises(ValueError):
        build_attention(cfg, 8, 8)
    cfg.score, cfg.local_composition = "dot", "outside"
    with pytest.raises(ValueError):
        build_attention(cfg, 8, 8)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("input_feed", [False, True])
def test_seq2seq_teacher_forcing_equals_step_by_step(mode, input_feed):
    torch.manual_seed(0)
    cfg = ModelConfig(
        layers=2,
        hidden=16,
        embed=12,
        attention=mode,
        score="general",
        input_feed=input_feed,
        dropout=0.0,
        window=2,
    )
    model = Seq2Seq(cfg, 20, 22, init_uniform=0.3).eval()
    src = torch.randint(4, 20, (3, 7))
    lengths = torch.tensor([7, 4, 2])
    src[1, 4:] = 0
    src[2, 2:] = 0
    tgt_in = torch.cat([torch.full((3, 1), 2), torch.randint(4, 22, (3, 9))], 1)
    with torch.no_grad():
        logits, weights = model(src, lengths, tgt_in, need_weights=True)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        for t in range(tgt_in.size(1)):
            step_logits, state, w = model.step(tgt_in[:, : t + 1], state, enc, need_weights=True)
            torch.testing.assert_close(step_logits, logits[:, t], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(w, weights[:, t], rtol=1e-4, atol=1e-6)
        # beam search re-indexes the encoder output; the step must agree with the reordered batch
        index = torch.tensor([1, 1, 0])
        enc2 = select_batch(enc, index)
        step_logits, _, _ = model.step(tgt_in[index, :1], model.init_state(enc2), enc2)
        torch.testing.assert_close(step_logits, logits[index, 0], rtol=1e-4, atol=1e-5)


def _reversal_batch(n: int, vocab: int, g: torch.Generator):
    """Sources of 6..12 random tokens; the target is the source reversed, then </s>."""
    lengths = torch.randint(6, 13, (n,), generator=g)
    S = int(lengths.max())
    src = torch.zeros(n, S, dtype=torch.long)
    tgt = torch.zeros(n, S + 1, dtype=torch.long)
    align = torch.full((n, S + 1), -1)  # the known alignment: target t <- source S_x - 1 - t
    for i, n_i in enumerate(lengths.tolist()):
        x = torch.randint(4, vocab, (n_i,), generator=g)
        src[i, :n_i] = x
        tgt[i, :n_i] = x.flip(0)
        tgt[i, n_i] = 3
        align[i, :n_i] = torch.arange(n_i - 1, -1, -1)
    tgt_in = torch.cat([torch.full((n, 1), 2), tgt[:, :-1]], 1)
    tgt_in = tgt_in.masked_fill(tgt_in == 3, 0)  # nothing is predicted after </s>
    return src, lengths, tgt_in, tgt, align


def test_local_p_learns_reversal_alignment():
    """Reversal puts the aligned source word S-1-t far outside local-m's window [t-2, t+2];
    local-p has to learn p_t ≈ S-1-t from h_t to translate at all."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        vocab = 24
        cfg = ModelConfig(
            layers=1,
            hidden=64,
            embed=32,
            attention="local-p",
            score="general",
            input_feed=False,
            dropout=0.0,
            window=2,
        )
        model = Seq2Seq(cfg, vocab, vocab)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(0)
        for _ in range(80):
            src, lengths, tgt_in, tgt, _ = _reversal_batch(64, vocab, g)
            logits, _ = model(src, lengths, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        src, lengths, tgt_in, tgt, align = _reversal_batch(
            200, vocab, torch.Generator().manual_seed(9)
        )
        with torch.no_grad():
            logits, weights = model(src, lengths, tgt_in, need_weights=True)
    finally:
        torch.set_num_threads(threads)
    real = tgt != 0
    accuracy = ((logits.argmax(-1) == tgt) & real).sum() / real.sum()
    aligned = align >= 0
    align_accuracy = ((weights.argmax(-1) == align) & aligned).sum() / aligned.sum()
    # chance for the argmax is ~1/9 (mean length); a window stuck at p_t = t would hit ~1/9 too
    assert accuracy > 0.8, accuracy
    assert align_accuracy > 0.6, align_accuracy
