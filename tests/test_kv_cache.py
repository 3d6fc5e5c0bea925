"""kernels/kv_cache.py: the search's buffered self-attention keys give the hypotheses and scores of
the definition's concatenated dicts (models/transformer.py), in greedy and beam search, with and
without sentences leaving the batch, for plain and variant attention."""

from __future__ import annotations

import pytest
import torch

from attnmt.config import Config, ModelConfig
from attnmt.decode.search import beam_search, greedy_search
from attnmt.attention.variant import Variant
from attnmt.attention.window import Window
from attnmt.kernels import kv_cache
from attnmt.models import build_model
from attnmt.models.common import repeat_rows, select_batch
from search_fixtures import off_and_on, padded_source


def _model(task="translate", **model):
    cfg = Config(model=ModelConfig(type="transformer"))
    cfg.task = task
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 4, 32, 0.0
    m.window_segment = 2
    for k, v in model.items():
        setattr(m, k, v)
    torch.manual_seed(0)
    return build_model(cfg, 30, 30).eval()


def _source(rows=4, seed=1):
    return padded_source(rows, seed)


def _both(model, search, *args, **kw):
    return off_and_on(model, "kv_buffers", search, *args, **kw)


def _same(a, b):
    assert [[h.tokens for h in s] for s in a] == [[h.tokens for h in s] for s in b]
    for sa, sb in zip(a, b):
        for ha, hb in zip(sa, sb):
            assert ha.logprob == pytest.approx(hb.logprob, abs=1e-5)


@pytest.mark.parametrize("variant", ["standard", "window-add", "window-mul-seg", "localness", "relative"])
@pytest.mark.parametrize("rows", [1, 4])  # one sentence: none leaves the batch before the end
@pytest.mark.parametrize("beam", [1, 5])
def test_buffered_search_equals_the_definition(variant, rows, beam):
    cross = "standard" if variant == "relative" else variant
    model = _model(dec_self_attention=variant, cross_attention=cross)
    src, lengths = _source(rows)
    kw = dict(max_len_ratio=1.5, max_len_extra=2, nbest=beam)
    generic, buffered = _both(model, beam_search, src, lengths, beam, **kw)
    _same(generic, buffered)
    assert any(len(h.tokens) > 2 for s in generic for h in s)  # the search made several steps
    if beam == 1:
        _same(*_both(model, greedy_search, src, lengths, max_len_ratio=1.5, max_len_extra=2))


def test_buffered_lm_search_equals_the_definition():
    model = _model("lm")
    src, lengths = _source(3)
    _same(*_both(model, beam_search, src, lengths, 3, max_len_ratio=1.0, max_len_extra=3))


@pytest.mark.parametrize("one_query,low", [(False, False), (True, False), (True, True), (False, True)])
def test_state_reorders_drops_rows_and_grows_as_concatenation(one_query, low):
    """Every layout holds the concatenated keys (the bfloat16 one: rounded to bfloat16)."""
    torch.manual_seed(0)
    state, cat = kv_cache.KVBuffer(), None
    rounded = (lambda x: x.to(torch.bfloat16).float()) if low else (lambda x: x)  # noqa: E731
    for t in range(kv_cache.FIRST_CAP + 5):  # past the first capacity: the buffers grow
        new = {"k": torch.randn(6, 2, 1, 3), "v": torch.randn(6, 2, 1, 3)}
        keys, state = state.extend(new, one_query, low)
        # low without one_query (a variant's bfloat16 search): the bfloat16 layout, keys returned
        assert state.one_query == (one_query or low) and (keys is None) == one_query
        assert state.layout == ("low" if low else "time" if one_query else "heads")
        keys = state.keys()
        cat = new if cat is None else {n: torch.cat([cat[n], new[n]], 2) for n in new}
        assert all(torch.equal(keys[n], rounded(cat[n])) for n in new)
        index = torch.randint(0, 6, (6,))
        state, cat = state.select(index), select_batch(cat, index)
        assert all(torch.equal(state.keys()[n], rounded(cat[n])) for n in new)
    if low:  # positions past the length are finite: a masked key times weight 0 stays 0
        assert state.buffers.cap % kv_cache.LOW_STEP == 0 and state.buffers.cap >= state.length
        assert all(bool(t[: state.rows].isfinite().all()) for t in state.buffers.tensors.values())
        cat = {n: rounded(c) for n, c in cat.items()}
    fewer = torch.tensor([4, 1])  # a sentence done: its rows leave
    state, cat = state.select(fewer), select_batch(cat, fewer)
    state, cat = repeat_rows(state, 3), repeat_rows(cat, 3)
    assert all(torch.equal(state.keys()[n], cat[n]) for n in cat)


def test_an_older_state_used_again_keeps_its_keys():
    state = kv_cache.KVBuffer()
    k = lambda x: {"k": torch.full((2, 1, 1, 1), float(x))}  # noqa: E731
    _, a = state.extend(k(1))
    _, b = a.extend(k(2))
    keys_c, c = a.extend(k(3))  # a branch from a: b keeps its 2
    assert b.keys()["k"].flatten().tolist() == [1, 2, 1, 2]
    assert keys_c["k"].flatten().tolist() == [1, 3, 1, 3]
    s1 = b.select(torch.tensor([1, 0]))
    s2 = b.select(torch.tensor([0]))  # the spare is held by s1: new buffers
    assert s1.keys()["k"].flatten().tolist() == [1, 2, 1, 2]
    assert s2.keys()["k"].flatten().tolist() == [1, 2]


def test_search_states_are_buffers_without_autograd_only():
    model = _model()
    src, lengths = _source(2)
    enc = model.encode(src, lengths)
    with torch.no_grad():
        assert all(isinstance(s, kv_cache.KVBuffer) for s in model.init_state(enc)["layers"])
    assert model.init_state(enc)["layers"] == []


def test_shared_memory_selects_as_the_repeated_memory():
    torch.manual_seed(0)
    cross = [{"k": torch.randn(3, 2, 5, 4), "v": torch.randn(3, 2, 5, 4)}]
    mask = torch.rand(3, 5) > 0.3
    shared = kv_cache.SharedMemory(torch.randn(3, 5, 8), mask, cross).repeat_rows(4)
    plain = repeat_rows({"out": shared.out, "mask": mask, "cross": cross}, 4)
    for index in (torch.tensor([0, 1, 2, 3, 8, 9, 10, 11]),  # whole sentences: stays shared
                  torch.tensor([5, 5, 0, 11, 2])):  # any rows: one entry per row
        got, want = shared.select(index), select_batch(plain, index)
        keys, m = got.cross[0].repeated()
        assert got.rows == (4 if index.numel() == 8 else 1)
        assert torch.equal(m, want["mask"]) and all(torch.equal(keys[n], want["cross"][0][n]) for n in keys)
    # a bfloat16 search's keys, made once, follow the selections (not made again from the keys)
    low = shared.cross[0].low()
    picked = shared.select(torch.tensor([4, 5, 6, 7])).repeat_rows(1)
    assert picked.cross[0]._low is not None
    fresh = kv_cache.SharedKeys(picked.cross[0].keys, picked.mask)
    assert all(torch.equal(a, b) for a, b in zip(picked.cross[0].low(), fresh.low()))
    assert torch.equal(picked.cross[0].low()[0], low[0][1:2])
    # a variant's keys, laid out once: the same values, Kᵀ contiguous for q Kᵀ, V contiguous
    laid = picked.cross[0].laid_out(Variant())
    assert all(torch.equal(laid[n], picked.cross[0].keys[n]) for n in laid)
    assert laid["k"].transpose(2, 3).is_contiguous() and laid["v"].is_contiguous()
    # a window's: K_L as K; the input pointers' keys with each side's (d_h, S) block contiguous
    keys = {"lk": torch.randn(3, 2, 5, 4), "pk": torch.randn(3, 2, 5, 8)}
    laid = kv_cache.SharedKeys(keys, mask).laid_out(Window("window-add"))
    assert all(torch.equal(laid[n], keys[n]) for n in keys)
    assert laid["lk"].transpose(2, 3).is_contiguous()
    assert laid["pk"].view(3, 2, 5, 2, 4).permute(0, 1, 3, 4, 2).is_contiguous()
    # ... and follow the selections in their layouts (not laid out again when a sentence leaves)
    memory = kv_cache.SharedMemory(torch.randn(3, 5, 8), mask, [{**cross[0], **keys}]).repeat_rows(2)
    unit = Window("window-add")
    made = memory.cross[0].laid_out(unit, low=True)
    kept = memory.select(torch.tensor([0, 1, 4, 5]))  # sentences 0 and 2, whole
    assert kept.cross[0]._laid_out is not None and kept.cross[0]._laid_out[0] is True
    fresh = kv_cache.SharedKeys(kept.cross[0].keys, kept.mask).laid_out(unit, low=True)
    for n, t in kept.cross[0].laid_out(unit, low=True).items():
        assert torch.equal(t, fresh[n]) and t.stride() == fresh[n].stride() and t.dtype == torch.bfloat16
        assert torch.equal(t, made[n][torch.tensor([0, 2])])


def test_shared_memory_selects_its_float32_keys_when_first_read(monkeypatch):
    """Selections of selections read what selecting each time reads; the float32 keys (which a
    bfloat16 search never reads) are selected once, when read, not at every selection."""
    torch.manual_seed(0)
    keys = {"k": torch.randn(4, 2, 5, 3), "v": torch.randn(4, 2, 5, 3)}
    out, mask = torch.randn(4, 5, 8), torch.rand(4, 5) > 0.3
    memory = kv_cache.SharedMemory(out, mask, [keys]).repeat_rows(2)
    memory.cross[0].low()
    calls = []
    select = torch.Tensor.index_select
    monkeypatch.setattr(torch.Tensor, "index_select", lambda t, *a: calls.append((*t.shape, t.dtype)) or select(t, *a))
    once = memory.select(torch.tensor([0, 1, 4, 5, 6, 7]))  # sentences 0, 2, 3
    twice = once.select(torch.tensor([2, 3, 4, 5]))  # of those, 2 and 3
    f32 = torch.float32
    assert (4, 2, 5, 3, f32) not in calls and (4, 5, 8, f32) not in calls  # the float32 tensors untouched so far
    entries = torch.tensor([2, 3])
    assert torch.equal(twice.out, out[entries]) and torch.equal(twice.mask, mask[entries])
    assert all(torch.equal(twice.cross[0].keys[n], keys[n][entries]) for n in keys)
    assert torch.equal(twice.cross[0].low()[1], keys["v"][entries].to(torch.bfloat16))
    assert calls.count((4, 2, 5, 3, f32)) == 2  # k and v: one selection each, of the composed entries
    assert torch.equal(once.cross[0].keys["k"], keys["k"][torch.tensor([0, 2, 3])])  # the first, still its own


def test_buffered_search_with_alignments_equals_the_definition():
    model = _model()
    src, lengths = _source(4)
    generic, buffered = _both(model, beam_search, src, lengths, 3, max_len_ratio=1.5, max_len_extra=2,
                              need_weights=True)
    _same(generic, buffered)
    for sa, sb in zip(generic, buffered):
        torch.testing.assert_close(sa[0].attention, sb[0].attention, atol=1e-5, rtol=0)


def test_beam_search_reuses_the_buffers(monkeypatch):
    """Each layer's buffers are made a few times per batch (first step, K copies, spare, growth),
    not once per step: a reorder writes into the spare the previous step left."""
    made = []
    init = kv_cache._Buffers.__init__
    monkeypatch.setattr(kv_cache._Buffers, "__init__", lambda self, *a: (made.append(1), init(self, *a))[1])
    model = _model()
    src, lengths = _source(1)
    hyps = beam_search(model, src, lengths, 3, max_len_ratio=4.0, max_len_extra=10)
    steps = len(hyps[0][0].tokens) + 1
    assert steps > 10 and len(made) <= 4 * len(model.decoder.layers)


@pytest.mark.parametrize("amx", [False, True])
def test_one_query_attention_is_the_definition_and_taken_by_standard_search_only(amx, monkeypatch):
    """A search step of standard self-attention reads time-major buffers through two products:
    the module's own attention over the concatenated keys; a variant keeps the definition's
    buffers. The bfloat16 layout through its two products, or SDPA (on AMX), alike."""
    monkeypatch.setattr(kv_cache, "_AMX", amx)
    torch.manual_seed(0)
    model = _model()
    attn = model.decoder.layers[0].self_attn
    state, low, cat = kv_cache.KVBuffer(), kv_cache.KVBuffer(), None
    with torch.no_grad():
        for t in range(kv_cache.LOW_STEP + 3):
            x = torch.randn(6, 1, 16)
            q, new = attn.project_self(x)[:2]
            _, state = state.extend(new, one_query=True)
            _, low = low.extend(new, one_query=True, low=True)
            cat = new if cat is None else {n: torch.cat([cat[n], new[n]], 2) for n in new}
            got = kv_cache.one_query_attention(attn, q, state)
            want, _ = attn(x, cat, None, True, t, False, None, q)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            # bfloat16 keys, all LOW_STEP positions read, those past t masked: the same up to rounding
            torch.testing.assert_close(kv_cache.one_query_attention(attn, q, low), want, atol=3e-2, rtol=3e-2)
            index = torch.randint(0, 6, (6,))
            state, cat, low = state.select(index), select_batch(cat, index), low.select(index)
    for variant, fast in (("standard", True), ("window-add", False), ("relative", False)):
        model = _model(dec_self_attention=variant)
        src, lengths = _source(2)
        with torch.no_grad():
            enc = model.encode(src, lengths)
            prefix = torch.full((2, 1), 2)
            _, state, _ = model.step(prefix, model.init_state(enc), enc)
        assert all(s.one_query == fast for s in state["layers"])
        for lin in model.modules():  # a bfloat16 search: its layout
            if hasattr(lin, "bf16_search"):
                lin.bf16_search = True
        with torch.no_grad():
            _, state, _ = model.step(prefix, model.init_state(enc), enc)
        plain_keys = variant != "window-add"  # its cache holds K_L too: the definition's layout
        assert all(s.layout == ("low" if plain_keys else "heads") for s in state["layers"])


@pytest.mark.parametrize("variant", ["relative", "localness", "window-mul"])
def test_a_variants_self_attention_in_a_bf16_search_reads_its_bf16_keys(variant):
    """A decoder self-attention variant whose cache is plain K and V, in a bfloat16 search: its
    products read the bfloat16 buffers as they are, over their whole capacity (no float32 copy
    of the cache per step; the positions past t causally masked): the definition over
    concatenated float32 keys up to bfloat16's rounding, step after step, reorders included."""
    torch.manual_seed(0)
    layer = _model(task="lm", dec_self_attention=variant).decoder.layers[0].eval()
    for lin in layer.modules():
        if hasattr(lin, "bf16_search"):
            lin.bf16_search = True
    state, cat = kv_cache.KVBuffer(), {}
    with torch.no_grad():
        for t in range(kv_cache.LOW_STEP + 3):
            x = torch.randn(6, 1, 16)
            got, _, state = layer(x, None, True, state, t)
            want, _, cat = layer(x, None, True, cat, t)
            assert state.layout == "low" and all(k.dtype == torch.bfloat16 and k.is_contiguous()
                                                 for k in state.low_keys().values())
            torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)
            index = torch.randint(0, 6, (6,))
            state, cat = state.select(index), select_batch(cat, index)


@pytest.mark.parametrize("variant, options", [
    ("window-add-seg", {}), ("window-mul", {}),
    ("window-add-seg", {"window_pointers": "input", "window_mask": "sum", "window_segment": 5})])
def test_a_variants_cross_attention_in_a_bf16_search_is_the_definition_up_to_rounding(variant, options):
    """SharedKeys.attend of a variant in a bfloat16 search: its products of bfloat16 keys laid out
    once (``laid_out(low=True)``) under bf16 products, the definition over repeated float32 keys
    up to bfloat16's rounding."""
    torch.manual_seed(0)
    attn = _model(cross_attention=variant, **options).decoder.layers[0].cross_attn
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    x = torch.randn(12, 1, 16)
    with torch.no_grad():
        shared = kv_cache.SharedKeys(attn.project_keys(torch.randn(3, 5, 16)), mask, rows=4)
        want, _ = attn(x, *shared.repeated(), False, 0, False, None)
        for lin in attn.modules():
            if hasattr(lin, "bf16_search"):
                lin.bf16_search = True
        got, _ = shared.attend(attn, x, False, None)
    assert shared._laid_out is not None and shared._laid_out[0]  # the bfloat16 keys were used
    assert all(t.dtype == torch.bfloat16 for t in shared._laid_out[1].values())
    torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)


def test_cross_attention_of_a_bf16_search_is_the_definition_up_to_rounding():
    """SharedKeys.attend in a bfloat16 search (its products of bfloat16 operands, the keys made
    contiguous once): the definition over the repeated keys, up to bfloat16's rounding."""
    torch.manual_seed(0)
    attn = _model().decoder.layers[0].cross_attn
    for lin in (attn.q, attn.o):
        lin.bf16_search = True
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    x = torch.randn(12, 1, 16)
    with torch.no_grad():
        shared = kv_cache.SharedKeys(attn.project_keys(torch.randn(3, 5, 16)), mask, rows=4)
        want, _ = attn(x, *shared.repeated(), False, 0, False, None)
        got, _ = shared.attend(attn, x, False, None)
    assert shared._low is not None  # the bfloat16 products ran
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
