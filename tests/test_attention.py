"""Global attention: shapes, gradients, masking, and the decoder's use of it."""

import pytest
import torch

from attnmt.attention import GlobalAttention, SCORES
from attnmt.config import ModelConfig
from attnmt.models.common import lengths_to_mask
from attnmt.models.seq2seq import Seq2Seq

B, T, S, D = 3, 4, 6, 8


def _inputs():
    torch.manual_seed(0)
    query = torch.randn(B, T, D, requires_grad=True)
    values = torch.randn(B, S, D, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([6, 4, 1]), S)
    return query, values, mask


@pytest.mark.parametrize("score", SCORES)
def test_score_shapes_gradients_and_normalisation(score):
    query, values, mask = _inputs()
    attn = GlobalAttention(score, D, D, max_src_len=10)
    memory = attn.prepare(values, mask)
    context, weights = attn(query, memory, torch.arange(T))
    assert context.shape == (B, T, D)
    assert weights.shape == (B, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T))
    (context.sum() + weights.pow(2).sum()).backward()
    assert query.grad is not None and query.grad.abs().sum() > 0
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    if score != "location":
        assert values.grad.abs().sum() > 0


@pytest.mark.parametrize("score", SCORES)
def test_padding_gets_no_weight_and_does_not_change_context(score):
    query, values, mask = _inputs()
    attn = GlobalAttention(score, D, D, max_src_len=10)
    context, weights = attn(query, attn.prepare(values, mask), torch.arange(T))
    assert weights[1, :, 4:].abs().max() == 0
    assert weights[2, :, 1:].abs().max() == 0
    torch.testing.assert_close(weights[2, :, 0], torch.ones(T))
    changed = values.detach().clone()
    changed[1, 4:] = 100.0  # garbage in the padding
    context2, _ = attn(query, attn.prepare(changed, mask), torch.arange(T))
    torch.testing.assert_close(context[1], context2[1])


def test_dot_score_is_the_inner_product():
    query, values, mask = _inputs()
    attn = GlobalAttention("dot", D, D)
    _, weights = attn(query, attn.prepare(values, torch.ones(B, S, dtype=torch.bool)), None)
    expected = torch.softmax(query @ values.transpose(1, 2), dim=-1)
    torch.testing.assert_close(weights, expected)


def test_general_score_uses_W_a():
    query, values, mask = _inputs()
    attn = GlobalAttention("general", D, D)
    full = torch.ones(B, S, dtype=torch.bool)
    _, weights = attn(query, attn.prepare(values, full), None)
    W = attn.score.W_a.weight  # maps memory -> query space
    expected = torch.softmax(query @ (values @ W.T).transpose(1, 2), dim=-1)
    torch.testing.assert_close(weights, expected)


def test_location_score_masks_to_actual_length_and_checks_maximum():
    query, values, mask = _inputs()
    attn = GlobalAttention("location", D, D, max_src_len=S)
    _, weights = attn(query, attn.prepare(values, mask), None)
    assert weights[2, :, 1:].abs().max() == 0
    too_long = GlobalAttention("location", D, D, max_src_len=S - 1)
    with pytest.raises(ValueError, match="max_src_len"):
        too_long(query, too_long.prepare(values, mask), None)


def test_input_feeding_widens_the_first_decoder_layer():
    fed = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8, input_feed=True), 20, 20)
    plain = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8, input_feed=False), 20, 20)
    assert fed.decoder.rnn.weight_ih_l0.shape == (64, 8 + 16)
    assert plain.decoder.rnn.weight_ih_l0.shape == (64, 8)
    assert fed.decoder.rnn.weight_ih_l1.shape == plain.decoder.rnn.weight_ih_l1.shape == (64, 16)


@pytest.mark.parametrize("attention,score", [("none", "dot"), ("global", "dot"), ("global", "general"),
                                             ("global", "concat"), ("global", "location")])
@pytest.mark.parametrize("feed", [True, False])
def test_teacher_forcing_equals_step_by_step(attention, score, feed):
    torch.manual_seed(1)
    cfg = ModelConfig(layers=2, hidden=16, embed=8, attention=attention, score=score, input_feed=feed,
                      bidirectional=(score == "general"), max_src_len=12)
    model = Seq2Seq(cfg, 20, 30, init_uniform=0.1).eval()
    src = torch.randint(4, 20, (3, 7))
    lengths = torch.tensor([7, 5, 2])
    tgt = torch.randint(4, 30, (3, 6))
    logits, weights = model(src, lengths, tgt, need_weights=True)
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    for t in range(tgt.size(1)):
        step_logits, state, step_w = model.step(tgt[:, : t + 1], state, enc, need_weights=True)
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-5, rtol=1e-5)
        if weights is not None:
            torch.testing.assert_close(step_w, weights[:, t], atol=1e-5, rtol=1e-5)


def test_padding_in_source_batch_does_not_change_a_sentence():
    torch.manual_seed(2)
    model = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8, score="general"), 20, 30, 0.1).eval()
    src = torch.randint(4, 20, (1, 5))
    tgt = torch.randint(4, 30, (1, 4))
    alone, _ = model(src, torch.tensor([5]), tgt)
    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    other = torch.randint(4, 20, (1, 8))
    batch_logits, _ = model(torch.cat([padded_src, other]), torch.tensor([5, 8]), torch.cat([tgt, tgt]))
    torch.testing.assert_close(batch_logits[0], alone[0], atol=1e-5, rtol=1e-5)


class _Entries:
    """A cached value that selects itself: records the entries it was asked for and offers a
    replacement for the selected memory's values."""

    def __init__(self, entries=None):
        self.entries = entries

    def select_entries(self, memory, entries):
        return _Entries(entries), {"values": memory.values.index_select(0, entries) + 100}


@pytest.mark.parametrize("rows, index, entries, rows_after", [
    (1, [2, 0, 0], [2, 0, 0], 1),  # one row per entry: the rows are the entries
    (2, [4, 5, 0, 1], [2, 0], 2),  # aligned blocks keep their entry shared
    (2, [5, 5, 0, 3], [2, 2, 0, 1], 1),  # otherwise one entry per row
])
def test_memory_select_carries_cached_values_that_select_themselves(rows, index, entries,
                                                                    rows_after):
    """Memory.select hands a cached value with select_entries the entries it keeps (for each
    way select reads its index), takes the fields it offers instead of copying them, and drops
    every other cached value; a memory without such values is index_selected as before."""
    from attnmt.attention.base import Memory

    values = torch.arange(3 * 2 * 1.0).view(3, 2, 1)
    mask = torch.tensor([[True, True], [True, False], [True, True]])
    memory = Memory(values=values, keys=values, mask=mask, lengths=mask.sum(1), shareable=True)
    memory = memory.repeat_rows(rows) if rows > 1 else memory
    memory.cached("self", lambda m: _Entries())
    memory.cached("other", lambda m: "derived from the entries")
    plain = Memory(values=values, keys=values, mask=mask, lengths=mask.sum(1), shareable=True)
    plain = plain.repeat_rows(rows) if rows > 1 else plain
    index = torch.tensor(index)
    selected, want = memory.select(index), plain.select(index)
    kept = torch.tensor(entries)
    assert selected.rows == want.rows == rows_after
    assert torch.equal(selected.cached("self", None).entries, kept)
    assert selected.cached("other", lambda m: "built again") == "built again"
    assert torch.equal(selected.values, values[kept] + 100)
    assert torch.equal(selected.keys, values[kept]) and torch.equal(want.values, values[kept])
    assert want.keys is want.values and "_cache" not in want.__dict__
    assert torch.equal(selected.mask, mask[kept])
    assert torch.equal(selected.lengths, mask[kept].sum(1))


@pytest.mark.parametrize("score", ["dot", "general"])
@pytest.mark.parametrize("rows", [1, 3])
def test_decoding_path_equals_the_autograd_path(score, rows):
    # without autograd, dot/general take softmax(q Kᵀ + b) with the mask as a bias cached on
    # the memory: the same numbers, bit for bit, padding included, for shared beam entries too
    torch.manual_seed(0)
    att = GlobalAttention(score, 8, 8)
    lengths = torch.tensor([6, 2, 4])
    values, mask = torch.randn(3, 6, 8), lengths_to_mask(lengths, 6)
    query = torch.randn(3 * rows, 2, 8)
    with torch.no_grad():
        memory = att.prepare(values, mask).repeat_rows(rows)
        context, weights = att(query, memory)
        again = att(query, memory)  # the cached bias
    expected = att(query, memory)  # autograd on: masked_softmax
    assert torch.equal(context, expected[0]) and torch.equal(weights, expected[1])
    assert torch.equal(again[0], context)
    assert (weights.view(3, rows, 2, 6)[1, ..., 2:] == 0).all()  # sentence 2 has 2 words
