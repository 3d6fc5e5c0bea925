"""Vectorised queries == the slow one-n-gram-at-a-time back-off recursion."""

import numpy as np
import pytest
import torch

from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.ngram import NgramLM
from attnmt.ngram.query import LN10


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    rng = np.random.default_rng(7)
    probs = 1.0 / np.arange(1, 26)
    probs /= probs.sum()
    lines = [" ".join(f"w{i}" for i in rng.choice(25, size=rng.integers(1, 10), p=probs))
             for _ in range(400)]
    path = tmp_path_factory.mktemp("q") / "c.txt"
    path.write_text("\n".join(lines) + "\n")
    return NgramLM.estimate_text(path, order=4)


def slow_row(lm, context):
    return torch.tensor([lm.logprob(context, w) * LN10 if w not in (PAD, BOS) else -1e4
                         for w in range(lm.vocab_size)])


def test_next_token_logprobs_equals_slow_query(lm):
    rng = np.random.default_rng(0)
    V = lm.vocab_size
    ctx = torch.from_numpy(rng.integers(4, V, size=(12, 3)))
    ctx[0] = torch.tensor([BOS, BOS, BOS])
    ctx[1] = torch.tensor([BOS, BOS, 5])
    ctx[2, 1] = BOS  # history before the last <s> is ignored
    ctx[3, 2] = EOS
    fast = lm.next_token_logprobs(ctx)
    for b in range(len(ctx)):
        assert torch.allclose(fast[b], slow_row(lm, ctx[b].tolist()), atol=2e-5), b
    # Longer contexts: only the last n-1 columns matter; shorter ones act like no left context.
    wide = torch.cat([torch.full((12, 2), 7), ctx], dim=1)
    assert torch.equal(lm.next_token_logprobs(wide), fast)
    short = lm.next_token_logprobs(ctx[:, -1:])
    assert torch.allclose(short[4], slow_row(lm, ctx[4, -1:].tolist()), atol=2e-5)
    empty = lm.next_token_logprobs(torch.zeros(3, 0, dtype=torch.long))
    assert torch.allclose(empty[0], slow_row(lm, []), atol=2e-5)


def test_sequence_logprobs_is_teacher_forcing(lm):
    rng = np.random.default_rng(1)
    B, T = 3, 9
    tokens = torch.from_numpy(rng.integers(4, lm.vocab_size, size=(B, T)))
    tokens[:, 0] = BOS
    out = lm.sequence_logprobs(tokens)
    assert out.shape == (B, T, lm.vocab_size)
    for t in range(T):
        hist = tokens[:, : t + 1]
        assert torch.allclose(out[:, t], lm.next_token_logprobs(hist), atol=1e-6), t
    for b in range(B):
        assert torch.allclose(out[b, 5], slow_row(lm, tokens[b, :6].tolist()), atol=2e-5)
    vals, idx = lm.sequence_logprobs(tokens, topk=5, chunk=7)
    top = torch.topk(out, 5, dim=-1)
    assert torch.allclose(vals, top.values) and torch.equal(
        torch.gather(out, -1, idx), vals)


def test_sentence_scores_match_slow_query(lm):
    words = ["w0", "w3", "unknown", "w1", "w1"]
    ids = lm.ids(words)
    scores = lm.full_scores(" ".join(words))
    seq = [BOS] + ids + [EOS]
    for i, (score, used, oov) in enumerate(scores):
        assert score == pytest.approx(lm.logprob(seq[: i + 1], seq[i + 1]), abs=1e-5)
        assert 1 <= used <= lm.order
        assert oov == (words[i] == "unknown" if i < len(words) else False)
    # Without <s>: the first word has no context at all.
    first = lm.full_scores("w0 w3", bos=False, eos=False)[0][0]
    assert first == pytest.approx(lm.logprob([], lm.index["w0"]), abs=1e-6)


def test_out_of_range_ids_read_as_unk(lm):
    ctx = torch.tensor([[BOS, 4, 10_000], [BOS, 4, 1]])
    out = lm.next_token_logprobs(ctx)
    assert torch.equal(out[0], out[1])
