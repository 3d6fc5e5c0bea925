"""Local attention's decoding path (kernels/local_decoding.py, autograd off): every step equals
the training path, beam rows share their sentence's padded tables (also after Memory.select), and
a step touches nothing that grows with the source length."""

from __future__ import annotations

import pytest
import torch
from tensor_probes import LargestTensor
from test_local_attention import SCORES, _inputs, _training_path

from attnmt.attention import LocalAttention
from attnmt.config import ModelConfig
from attnmt.kernels import local_decoding
from attnmt.models.common import lengths_to_mask, select_batch
from attnmt.models.seq2seq import Seq2Seq


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


def _steps_equal_the_training_path(att, query, values, mask):
    """Each of the 12 one-step decoding calls equals the training path, weights included."""
    positions = torch.arange(12)
    ref_context, ref_dense = _training_path(att, query, values, mask, positions)
    with torch.no_grad():
        memory = att.prepare(values, mask)
        for t in range(12):
            c_t, w_t = att(query[:, t : t + 1], memory, positions[t : t + 1])
            torch.testing.assert_close(c_t, ref_context[:, t : t + 1], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(w_t, ref_dense[:, t : t + 1], rtol=1e-5, atol=1e-6)


def test_decoding_tables_follow_the_predictor_weights_and_longer_sources():
    """The tables kept on the module between sentences (W_pᵀ, v_p, the positions) are taken
    again after an in-place update of W_p or v_p (as an optimizer step makes) and grow with a
    longer source: every decoding step still equals the training path."""
    att = LocalAttention("local-p", "dot", 8, 8, window=2)
    for lengths, S, update in (((9,), 9, None), ((9,), 9, "W_p"), ((4,), 4, "v_p"),
                               ((30,), 30, None), ((9,), 9, "W_p")):
        if update is not None:
            with torch.no_grad():
                getattr(att, update).weight.mul_(-3.0)  # moves p_t, so windows change
        query, values, mask = _inputs(B=1, S=S, lengths=lengths, seed=S)
        _steps_equal_the_training_path(att, query, values, mask)


def test_decoding_tables_follow_a_fused_adam_step():
    """Fused Adam updates the parameters in place without bumping their version counters, so
    the tables kept on the module cannot tell its steps by their key. Leaving training mode (as
    the trainer's validation does, ``model.eval()``) drops them: decoding after each step still
    equals the training path."""
    att = LocalAttention("local-p", "dot", 8, 8, window=2)
    query, values, mask = _inputs(B=1, S=9, lengths=(9,), seed=9)
    positions = torch.arange(12)
    optimizer = torch.optim.Adam(att.parameters(), lr=0.3, fused=True)
    before = att.W_p.weight.detach().clone()
    for _ in range(3):
        att.eval()
        _steps_equal_the_training_path(att, query, values, mask)
        att.train()
        context, _ = att(query, att.prepare(values, mask), positions, need_weights=False)
        optimizer.zero_grad()
        (context * values[:, :1]).sum().backward()  # a loss whose gradient moves p_t
        optimizer.step()
    assert not torch.allclose(att.W_p.weight, before)
