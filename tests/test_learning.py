"""Learning test: on a synthetic copy task of long inputs an attention model reaches >= 95 % exact
match within a few hundred updates, while the no-attention baseline of the same size, given the same
number of updates, does not come close."""

import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.decode.search import greedy_search
from attnmt.models.seq2seq import Seq2Seq
from attnmt.train.training import token_loss

VOCAB = 12  # 4 specials + 8 symbols


def _sample(n, rng, lo=8, hi=12):
    lengths = torch.randint(lo, hi + 1, (n,), generator=rng).tolist()
    return [torch.randint(4, VOCAB, (k,), generator=rng).tolist() for k in lengths]


def _exact_match(model, sentences) -> float:
    model.eval()
    batch = collate(sentences, None, list(range(len(sentences))))
    hyps = greedy_search(model, batch.src, batch.src_lengths)
    model.train()
    return sum(h[0].tokens == s for h, s in zip(hyps, sentences)) / len(sentences)


def _train(attention: str, max_steps: int, target: float | None = None) -> tuple[Seq2Seq, int]:
    """Train until dev exact match >= target (checked every 50 updates) or max_steps."""
    torch.manual_seed(0)
    rng = torch.Generator().manual_seed(0)
    dev = _sample(100, torch.Generator().manual_seed(1))
    cfg = ModelConfig(layers=1, hidden=64, embed=32, attention=attention, score="general",
                      bidirectional=True, input_feed=True, dropout=0.0)
    model = Seq2Seq(cfg, VOCAB, VOCAB)
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    for step in range(1, max_steps + 1):
        src = _sample(64, rng)
        batch = collate(src, src, list(range(len(src))))
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = token_loss(logits, batch.tgt_out) / batch.target_tokens
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        if target is not None and step % 50 == 0 and _exact_match(model, dev) >= target:
            return model, step
    return model, max_steps


def test_attention_learns_to_copy_long_inputs_and_the_baseline_does_not():
    torch.set_num_threads(1)
    test = _sample(200, torch.Generator().manual_seed(2))
    attentive, steps = _train("global", max_steps=500, target=0.98)
    attentive_match = _exact_match(attentive, test)
    assert attentive_match >= 0.95
    baseline, _ = _train("none", max_steps=steps)
    # the same number of updates leaves the baseline far behind (how far depends on when the
    # attention model crossed its target, which float rounding can move by a check or two)
    assert _exact_match(baseline, test) < attentive_match - 0.4
