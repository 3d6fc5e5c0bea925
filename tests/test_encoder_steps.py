"""The CPU encoder's step loop over the padded batch computes what nn.LSTM does on the packed batch:
states, final (h, c) and every parameter gradient, uni- and bidirectional, 1-3 layers."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.models.encoders import LSTMEncoder


def _packed_reference(enc, src, lengths):
    """The encoder as one nn.LSTM call on the packed batch (the CUDA path)."""
    emb = enc.dropout(enc.embedding(src))
    packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = enc.rnn(packed)
    states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
    if enc.bidirectional:
        h = torch.cat([h[0::2], h[1::2]], dim=-1)
        c = torch.cat([c[0::2], c[1::2]], dim=-1)
    return states, (h, c)


def _run(fn, enc, src, lengths, weights):
    enc.zero_grad()
    states, (h, c) = fn(src, lengths)
    w_s, w_h, w_c = weights
    # a loss that reaches every output, including the final states of every layer
    loss = (states * w_s).sum() + (h * w_h).sum() + (c * w_c).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in enc.named_parameters()}
    return states.detach(), h.detach(), c.detach(), grads


LENGTHS = {
    "random": [7, 1, 9, 4, 9, 2],
    "length_one": [1, 1, 1],
    "all_equal": [5, 5, 5, 5],
    "single": [6],
}


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(LENGTHS))
def test_step_loop_equals_packed_lstm(dtype, tol, bidirectional, layers, case):
    torch.manual_seed(layers * 10 + bidirectional)
    enc = LSTMEncoder(20, 6, 8, layers, dropout=0.0, bidirectional=bidirectional).to(dtype)
    for p in enc.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    lengths = torch.tensor(LENGTHS[case])
    S = int(lengths.max()) + (1 if case == "random" else 0)  # also a column of padding only
    src = torch.randint(4, 20, (len(lengths), S))
    src[torch.arange(S) >= lengths.unsqueeze(1)] = 0  # PAD after each row
    weights = (
        torch.randn(len(lengths), S, 8, dtype=dtype),
        torch.randn(layers, len(lengths), 8, dtype=dtype),
        torch.randn(layers, len(lengths), 8, dtype=dtype),
    )
    got = _run(enc, enc, src, lengths, weights)
    want = _run(lambda s, n: _packed_reference(enc, s, n), enc, src, lengths, weights)
    for a, b in zip(got[:3], want[:3]):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=tol, rtol=0)
    assert (got[0][torch.arange(S) >= lengths.unsqueeze(1)] == 0).all()  # padding states are 0
    assert got[3].keys() == want[3].keys()
    for name in want[3]:
        torch.testing.assert_close(got[3][name], want[3][name], atol=tol, rtol=0, msg=name)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_eval_mode_with_dropout_equals_packed_lstm(bidirectional):
    torch.manual_seed(3)
    enc = LSTMEncoder(20, 6, 8, 3, dropout=0.4, bidirectional=bidirectional).double().eval()
    lengths = torch.tensor([3, 8, 1, 8, 5])
    src = torch.randint(4, 20, (5, 8))
    src[torch.arange(8) >= lengths.unsqueeze(1)] = 0
    weights = (
        torch.randn(5, 8, 8).double(),
        torch.randn(3, 5, 8).double(),
        torch.randn(3, 5, 8).double(),
    )
    got = _run(enc, enc, src, lengths, weights)
    want = _run(lambda s, n: _packed_reference(enc, s, n), enc, src, lengths, weights)
    for a, b in zip(got[:3], want[:3]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    for name in want[3]:
        torch.testing.assert_close(got[3][name], want[3][name], atol=1e-10, rtol=0, msg=name)


def test_training_dropout_between_layers_is_applied():
    torch.manual_seed(4)
    enc = LSTMEncoder(20, 6, 8, 2, dropout=0.5).train()
    src = torch.randint(4, 20, (3, 6))
    lengths = torch.tensor([6, 6, 6])
    a, _ = enc(src, lengths)
    b, _ = enc(src, lengths)
    assert not torch.equal(a, b)
    enc.eval()
    torch.testing.assert_close(enc(src, lengths)[0], enc(src, lengths)[0], atol=0, rtol=0)


def test_zero_length_is_rejected():
    enc = LSTMEncoder(20, 6, 8, 1)
    with pytest.raises(ValueError):
        enc(torch.randint(4, 20, (2, 3)), torch.tensor([3, 0]))
