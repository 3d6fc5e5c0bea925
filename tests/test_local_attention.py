"""Local attention (local-m, local-p): window arithmetic, equivalences, gradients, real locality."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tensor_probes import LargestTensor

from attnmt.attention import GlobalAttention, LocalAttention, build_attention, local_decoding
from attnmt.attention import window_products
from attnmt.attention.window_products import WindowDot, WindowSum
from attnmt.config import ModelConfig
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


@pytest.mark.parametrize(
    "mode, sigma, composition",
    [("local-m", None, "paper"), ("local-m", 1.5, "inside"), ("local-m", 1.5, "paper"),
     ("local-p", None, "paper"), ("local-p", None, "inside")],
)
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("lengths", [(9, 5, 1), (9, 7, 6)])
def test_decoding_step_equals_the_training_path(monkeypatch, mode, sigma, composition, score,
                                                lengths):
    """Without autograd (decoding): one step at a time and a block of T steps, whole or in
    chunks, with and without weights, equal the training path; windows run past both ends of
    sentences of different lengths (with lengths 9, 7, 6 local-m's first steps take the
    aligned, gather-free path, later ones the gathered one)."""
    query, values, mask = _inputs(lengths=lengths)
    values = values.masked_fill(~mask.unsqueeze(-1), float("nan"))  # padding must never be read
    att = LocalAttention(mode, score, 8, 8, window=2, sigma=sigma, composition=composition)
    positions = torch.arange(12)
    ref_context, ref_dense = _training_path(att, query, values.nan_to_num(), mask, positions)
    for chunked in (False, True):
        if chunked:  # every step's windows in chunks (one row per chunk at batch 3)
            monkeypatch.setattr(local_decoding, "STEP_WINDOW_ELEMENTS", 1)
            monkeypatch.setattr(local_decoding, "STEP_CHUNKS", 1000)
        with torch.no_grad():
            memory = att.prepare(values, mask)
            context, dense = att(query, memory, positions, need_weights=True)
            alone, none = att(query, memory, positions, need_weights=False)
            assert none is None
            torch.testing.assert_close(alone, context)
            torch.testing.assert_close(context, ref_context, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(dense, ref_dense, rtol=1e-5, atol=1e-6)
            for t in range(12):
                c_t, w_t = att(query[:, t : t + 1], memory, positions[t : t + 1])
                torch.testing.assert_close(c_t, ref_context[:, t : t + 1], rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(w_t, ref_dense[:, t : t + 1], rtol=1e-5, atol=1e-6)
            for b in range(3):  # batch 1 (greedy search of one sentence): its own path
                alone = memory.select(torch.tensor([b]))
                for t in range(12):
                    c_t, w_t = att(query[b : b + 1, t : t + 1], alone, positions[t : t + 1])
                    torch.testing.assert_close(c_t, ref_context[b : b + 1, t : t + 1],
                                               rtol=1e-5, atol=1e-6)
                    torch.testing.assert_close(w_t, ref_dense[b : b + 1, t : t + 1],
                                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, composition", [("local-m", "paper"), ("local-p", "paper"),
                                               ("local-p", "inside")])
@pytest.mark.parametrize("lengths", [(40,), (40, 23, 9)])
@pytest.mark.parametrize("spread", [0.01, 3.0])
def test_beam_rows_read_their_sentence_as_one_block(monkeypatch, mode, composition, lengths,
                                                     spread):
    """The k hypotheses of a beam (a memory with repeat_rows(k)) read their sentence's windows
    through one block of rows when the windows are close (a slice for one sentence, a gather
    for several), and through gathered windows when they are far apart: both equal the
    training path, weights included, at a step inside every sentence and one past the ends."""
    E, S, d, k = len(lengths), 40, 8, 4
    torch.manual_seed(0)  # the attention's parameters
    g = torch.Generator().manual_seed(1)
    values = torch.randn(E, S, d, generator=g)
    mask = lengths_to_mask(torch.tensor(lengths), S)
    query = (torch.randn(E, 1, 1, d, generator=g)
             + spread * torch.randn(E, k, 1, d, generator=g)).view(E * k, 1, d)
    sigma = 1.5 if mode == "local-m" else None
    att = LocalAttention(mode, "general", d, d, window=3, sigma=sigma, composition=composition)
    with torch.no_grad():
        if mode == "local-p":  # p_t spread over the sentence when the queries are
            att.v_p.weight.mul_(8)
    monkeypatch.setattr(local_decoding, "STEP_WINDOW_ELEMENTS", 0)  # blocks at any size
    taken = []  # one sentence's local-p rows: _sentence_step's slice; else _attend_blocks
    record = lambda fn: lambda *a: taken.append(fn(*a)) or taken[-1]
    if E == 1 and mode == "local-p":
        build = local_decoding._sentence_step
        monkeypatch.setattr(local_decoding, "_sentence_step", lambda *a: record(build(*a)))
    else:
        monkeypatch.setattr(local_decoding, "_attend_blocks", record(local_decoding._attend_blocks))
    for t in (12, 45):
        positions = torch.tensor([t])
        with torch.enable_grad():
            memory = att.prepare(values, mask).repeat_rows(k)
            want, want_dense = (x.detach() for x in att(query, memory, positions))
        with torch.no_grad():
            memory = att.prepare(values, mask).repeat_rows(k)
            got, dense = att(query, memory, positions, need_weights=True)
            alone, _ = att(query, memory, positions, need_weights=False)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(alone, got)
        torch.testing.assert_close(dense, want_dense, rtol=1e-5, atol=1e-6)
    paths = [x is not None for x in taken]
    if spread < 1 or mode == "local-m":  # one centre per sentence, or nearly
        assert paths and all(paths)
    else:
        assert not all(paths)  # far apart: gathered windows


def test_beam_blocks_stay_inside_their_sentence(monkeypatch):
    """Sentences whose hypotheses spread differently share one block width: the block of a
    sentence whose windows sit at its end must not run past its rows (into the next sentence,
    or past the buffer for the last one)."""
    E, S, d, k, D = 2, 40, 8, 4, 3
    g = torch.Generator().manual_seed(0)
    values = torch.randn(E, S, d, generator=g)
    mask = torch.ones(E, S, dtype=torch.bool)
    att = LocalAttention("local-p", "general", d, d, window=D)
    with torch.no_grad():  # p_t = S·σ(20·tanh(h_1)): each row's p_t chosen through h_1
        att.W_p.weight.copy_(torch.eye(d))
        att.v_p.weight.zero_()[0, 0] = 20.0
    targets = torch.tensor([[0.5, 5.5, 5.5, 5.5], [39.5, 39.5, 39.2, 39.5]])  # p_t per row
    query = torch.randn(E, k, 1, d, generator=g)
    query[..., 0] = torch.atanh(torch.logit(targets / S) / 20).unsqueeze(-1)
    query = query.view(E * k, 1, d)
    positions = torch.tensor([3])
    monkeypatch.setattr(local_decoding, "STEP_WINDOW_ELEMENTS", 0)  # blocks at any size
    with torch.enable_grad():
        memory = att.prepare(values, mask).repeat_rows(k)
        want, want_dense = (x.detach() for x in att(query, memory, positions))
        p = att.aligned_positions(query, memory, positions).detach()
    torch.testing.assert_close(p.view(E, k), targets, rtol=0, atol=1e-3)
    with torch.no_grad():
        got, dense = att(query, att.prepare(values, mask).repeat_rows(k), positions)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dense, want_dense, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("composition", ["paper", "inside"])
@pytest.mark.parametrize("targets", [[10.3, 12.7, 10.9, 14.1], [0.5, 2.5, 1.1, 0.2],
                                     [39.5, 37.2, 39.9, 38.0], [20.5, 20.1, 20.9, 20.4],
                                     [3.5, 3.5, 3.5, 30.5]])
def test_one_sentence_beam_rows_read_one_slice(composition, targets):
    """The k hypotheses of one sentence read one slice of its padded rows, each row's window
    cut out by a band mask when their centres differ (at the sentence's start and end too); far
    apart, they gather windows: all equal the training path, weights included."""
    S, d, k, D = 40, 8, 4, 3
    g = torch.Generator().manual_seed(0)
    values = torch.randn(1, S, d, generator=g)
    mask = torch.ones(1, S, dtype=torch.bool)
    att = LocalAttention("local-p", "general", d, d, window=D, composition=composition)
    with torch.no_grad():  # p_t = S·σ(20·tanh(h_1)): each row's p_t chosen through h_1
        att.W_p.weight.copy_(torch.eye(d))
        att.v_p.weight.zero_()[0, 0] = 20.0
    query = torch.randn(k, 1, d, generator=g)
    query[:, 0, 0] = torch.atanh(torch.logit(torch.tensor(targets) / S) / 20)
    positions = torch.tensor([3])
    with torch.enable_grad():
        memory = att.prepare(values, mask).repeat_rows(k)
        want, want_dense = (x.detach() for x in att(query, memory, positions))
    with torch.no_grad():
        memory = att.prepare(values, mask).repeat_rows(k)
        got, dense = att(query, memory, positions)
        alone, _ = att(query, memory, positions, need_weights=False)
        sliced = local_decoding.padded(att, memory)["sentence_step"](query, False)
    assert (sliced is None) == (max(targets) - min(targets) > 20)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alone, got)
    torch.testing.assert_close(dense, want_dense, rtol=1e-5, atol=1e-6)


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


def test_memory_select_for_beam_search():
    query, values, mask = _inputs()
    att = LocalAttention("local-p", "concat", 8, 8, window=2)
    memory = att.prepare(values, mask)
    index = torch.tensor([2, 2, 0, 1])
    c_sel, w_sel = att(query[index], memory.select(index), None)
    c_all, w_all = att(query, memory, None)
    torch.testing.assert_close(c_sel, c_all[index])
    torch.testing.assert_close(w_sel, w_all[index])


def _select_chain(memory):
    """A beam search's re-indexings of a memory of 4 sentences, K = 3 rows each: every
    memory on the way (aligned blocks dropping and repeating a sentence, unaligned rows, one
    row per entry, one sentence alone, its K rows again)."""
    K = 3
    out = [memory.repeat_rows(K)]
    blocks = lambda entries: (torch.tensor(entries).view(-1, 1) * K + torch.arange(K)).view(-1)
    out.append(out[-1].select(blocks([0, 2, 3])))  # a sentence done: aligned, rows kept
    out.append(out[-1].select(blocks([2, 0, 0])))
    out.append(out[-1].select(torch.tensor([4, 4, 0, 8, 1])))  # unaligned: one row per entry
    out.append(out[-1].select(torch.tensor([3, 0, 3])))  # rows == 1
    out.append(out[-1].select(torch.tensor([1])))  # one sentence
    out.append(out[-1].repeat_rows(K).select(torch.arange(K)))
    return out


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("score", ["dot", "general", "concat"])
@pytest.mark.parametrize("composition", ["paper", "inside"])
def test_selected_memory_keeps_its_padded_tables(monkeypatch, mode, score, composition):
    """Memory.select of a decoding memory selects its padded tables instead of padding the
    selected states again: at every re-indexing of a beam search the tables equal those of
    padding the selected memory (today's path: the oracle), the memory's states are views into
    them, and every step (aligned, gathered, in chunks, in blocks, one sentence's slice) gives
    the same numbers to the last bit."""
    query, values, mask = _inputs(B=4, lengths=(9, 6, 3, 7))
    values = values.masked_fill(~mask.unsqueeze(-1), float("nan"))  # padding must never be read
    att = LocalAttention(mode, score, 8, 8, window=2, composition=composition)
    calls = []
    pad_memory = local_decoding.pad_memory
    monkeypatch.setattr(local_decoding, "pad_memory",
                        lambda *a: calls.append(a) or pad_memory(*a))
    with torch.no_grad():
        chain = _select_chain(att.prepare(values, mask))
        assert len(calls) == 1  # prepare's: never again
        monkeypatch.delattr(local_decoding.PaddedTables, "select_entries")  # today's select
        oracle = _select_chain(att.prepare(values, mask))
    g = torch.Generator().manual_seed(5)
    for got, want in zip(chain, oracle):
        assert (got.rows, got.values.shape, got.keys is got.values) == (
            want.rows, want.values.shape, want.keys is want.values)
        for name in ("values", "keys", "mask", "lengths"):
            assert torch.equal(getattr(got, name), getattr(want, name))
        pad, fresh = local_decoding.padded(att, got), local_decoding.padded(att, want)
        assert got.values.data_ptr() == pad["values_pad"][:, 2:].data_ptr()
        assert got.keys.data_ptr() == pad["keys_pad"][:, 2:].data_ptr()
        assert pad.keys() == fresh.keys()
        for key, value in fresh.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(pad[key], value), key
            elif key != "sentence_step":
                assert pad[key] == value, key
        assert (pad["sentence_step"] is None) == (fresh["sentence_step"] is None)
        q = torch.randn(got.mask.size(0) * got.rows, 1, 8, generator=g)
        for elements in (local_decoding.STEP_WINDOW_ELEMENTS, 1):  # 1: chunks or blocks
            monkeypatch.setattr(local_decoding, "STEP_WINDOW_ELEMENTS", elements)
            for t in (0, 2, 5, 20):
                with torch.no_grad():
                    c, w = att(q, got, torch.tensor([t]))
                    c_want, w_want = att(q, want, torch.tensor([t]))
                assert torch.equal(c, c_want) and torch.equal(w, w_want)
    assert len(calls) == 2 + len(oracle) - 1  # prepare's twice, and the oracle's selected


@pytest.mark.parametrize("score", ["dot", "general"])
def test_lazily_padded_memory_selects_its_tables_but_not_its_states(monkeypatch, score):
    """A memory prepared with autograd on and decoded without it is padded on first use; its
    selection keeps the selected tables but copies its own states (they are no views into the
    buffers: padding is zeroed there, not in them), and decodes as the training path does."""
    query, values, mask = _inputs(T=1)
    values = values.masked_fill(~mask.unsqueeze(-1), 7.0)  # garbage the buffers zero
    att = LocalAttention("local-p", score, 8, 8, window=2)
    memory = att.prepare(values, mask)  # autograd on: no tables yet
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        att(query, memory, None)
        calls = []
        monkeypatch.setattr(local_decoding, "pad_memory", lambda *a: calls.append(a))
        selected = memory.select(index)
        got, w_got = att(query[index], selected, None)
    assert not calls
    assert torch.equal(selected.values, values[index]) and torch.equal(selected.keys, values[index])
    want, w_want = _training_path(att, query[index], None, None, None, memory=selected)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w_got, w_want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("score, composition", [("dot", "paper"), ("general", "inside"),
                                                ("general", "paper")])
def test_beam_search_does_not_pad_the_memory_again(monkeypatch, mode, score, composition):
    """A batched beam search whose sentences leave the batch at different steps pads its
    memory once, and finds what padding every selected memory again finds, to the last bit
    (hypotheses, scores, attention)."""
    from attnmt.decode.search import beam_search

    torch.manual_seed(0)
    cfg = ModelConfig(layers=1, hidden=16, embed=12, attention=mode, score=score,
                      local_composition=composition, input_feed=True, dropout=0.0, window=2)
    model = Seq2Seq(cfg, 20, 22, init_uniform=0.3).eval()
    src = torch.randint(4, 20, (4, 9))
    lengths = torch.tensor([9, 4, 2, 6])
    src[lengths.view(-1, 1) <= torch.arange(9)] = 0
    calls = []
    pad_memory = local_decoding.pad_memory
    monkeypatch.setattr(local_decoding, "pad_memory",
                        lambda *a: calls.append(a) or pad_memory(*a))

    def run():  # limits |x| + 2: 11, 6, 4, 8 steps
        return beam_search(model, src, lengths, beam_size=3, nbest=3, max_len_ratio=1.0,
                           max_len_extra=2, need_weights=True)

    got = run()
    assert len(calls) == 1
    monkeypatch.delattr(local_decoding.PaddedTables, "select_entries")
    want = run()
    assert len(calls) > 2  # the oracle padded again as sentences left
    for hyps, ref in zip(got, want):
        assert [(h.tokens, h.logprob, h.score) for h in hyps] == [
            (h.tokens, h.logprob, h.score) for h in ref]
        assert all(torch.equal(h.attention, r.attention) for h, r in zip(hyps, ref))


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("score", ["general", "concat"])
@pytest.mark.parametrize("t", [0, 4])  # local-m: every sentence longer than t (no gather), or not
def test_beam_rows_share_their_sentence_entry(mode, score, t):
    """repeat_rows(K) keeps one entry per sentence (no copy); K query rows reading it get what
    K separate copies give, and so do later reorderings, aligned or not; the decoding path
    (memory prepared without autograd) equals the training path on the copies."""
    query, values, mask = _inputs(T=1)
    att = LocalAttention(mode, score, 8, 8, window=2)
    K = 4
    memory = att.prepare(values, mask)
    shared = memory.repeat_rows(K)
    assert shared.rows == K and shared.values.data_ptr() == values.data_ptr()
    copied = select_batch(memory, torch.arange(3).repeat_interleave(K))
    assert copied.rows == 1
    q = torch.randn(3 * K, 1, 8, generator=torch.Generator().manual_seed(3))
    positions = torch.tensor([t])
    with torch.no_grad():
        decoding = att.prepare(values, mask)
        shared_d = decoding.repeat_rows(K)
        assert shared_d.values.data_ptr() == decoding.values.data_ptr()
        # padded once per sentence
        assert local_decoding.padded(att, shared_d) is local_decoding.padded(att, decoding)
        for index in (None, torch.tensor([4, 5, 6, 7, 0, 1, 2, 3]), torch.tensor([5, 5, 0, 11])):
            a = shared if index is None else select_batch(shared, index)
            b = copied if index is None else select_batch(copied, index)
            d = shared_d if index is None else select_batch(shared_d, index)
            qi = q if index is None else q[index]
            c_a, w_a = att(qi, a, positions)
            c_b, w_b = att(qi, b, positions)
            c_d, w_d = att(qi, d, positions)
            c_ref, w_ref = _training_path(att, qi, None, None, positions, memory=b)
            for c, w in ((c_a, w_a), (c_b, w_b), (c_d, w_d)):
                torch.testing.assert_close(c, c_ref, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
@pytest.mark.parametrize("B", [1, 3])
def test_decoding_step_touches_nothing_of_source_length(mode, B):
    """After prepare, a decoding step (no weights asked for) produces no tensor with as many
    elements as the source is long: only windows, (B, 2D+1) scores and (B, d) vectors."""
    S, d, D = 4000, 4, 3
    values = torch.randn(B, S, d)
    att = LocalAttention(mode, "general", d, d, window=D)
    with torch.no_grad():
        memory = att.prepare(values, torch.ones(B, S, dtype=torch.bool))
        query = torch.randn(B, 1, d)
        for t in (5, S + 7):  # local-m: inside every sentence, and past the end
            with LargestTensor() as probe:
                att(query, memory, torch.tensor([t]), need_weights=False)
            assert probe.largest <= max(B * (2 * D + 1) * d, 2 * d * d) < S


def test_decoding_under_autocast_runs_close_to_float32():
    """bfloat16 autocast (evaluation on CPU): scores in low precision, mask and softmax in float32.
    local-p's window may move with its low-precision p_t, so only local-m is compared."""
    query, values, mask = _inputs()
    for mode in ("local-m", "local-p"):
        att = LocalAttention(mode, "general", 8, 8, window=2)
        with torch.no_grad():
            memory = att.prepare(values, mask)
            ref, _ = att(query, memory, torch.arange(12))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                one, _ = att(query[:1, 3:4], memory.select(torch.tensor([0])), torch.tensor([3]))
                block, w = att(query, memory, torch.arange(12))
        assert torch.isfinite(block).all() and torch.isfinite(one).all() and w.dtype == torch.float
        if mode == "local-m":
            torch.testing.assert_close(one.float(), ref[:1, 3:4], rtol=0.05, atol=0.05)
            torch.testing.assert_close(block.float(), ref, rtol=0.05, atol=0.05)


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


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_search_with_the_decoding_path_equals_the_training_path(monkeypatch, mode):
    """Greedy and beam search over sentences of different lengths find the same hypotheses with
    the same scores whether the attention takes the decoding path or today's training path."""
    from attnmt.decode.search import beam_search, greedy_search

    torch.manual_seed(0)
    cfg = ModelConfig(layers=2, hidden=16, embed=12, attention=mode, score="general",
                      input_feed=True, dropout=0.0, window=2)
    model = Seq2Seq(cfg, 20, 22, init_uniform=0.3).eval()
    src = torch.randint(4, 20, (3, 9))
    lengths = torch.tensor([9, 4, 2])
    src[1, 4:] = 0
    src[2, 2:] = 0

    def run():
        return [greedy_search(model, src, lengths, max_len_cap=14),
                beam_search(model, src, lengths, beam_size=3, nbest=3, max_len_cap=14)]

    new = run()
    decode = local_decoding.decode

    def training_path(self, query, memory, positions, need_weights):
        with torch.enable_grad():
            context, weights = LocalAttention.forward(self, query, memory, positions, need_weights)
        return context.detach(), (weights.detach() if weights is not None else None)

    monkeypatch.setattr(local_decoding, "decode", training_path)
    old = run()
    monkeypatch.setattr(local_decoding, "decode", decode)
    for got, want in zip(new, old):
        for hyps, ref in zip(got, want):
            assert [h.tokens for h in hyps] == [h.tokens for h in ref]
            for h, r in zip(hyps, ref):
                assert h.score == pytest.approx(r.score, rel=1e-5, abs=1e-5)


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
