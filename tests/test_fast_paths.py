"""The speed paths of the LSTM model compute what the plain ones do: global and local attention's
per-step functions (memory gradient summed once) give the plain gradients; the decoder's cached step
weights follow weight updates; beam search drops finished sentences without changing results."""

import pytest
import torch
import torch.nn.functional as F

from attnmt.attention.global_attention import GlobalAttention
from attnmt.attention.local_attention import LocalAttention
from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.decode.search import beam_search
from attnmt.kernels import attention_steps, lstm_steps
from attnmt.models.seq2seq import Seq2Seq


def _batch(seed=1, src_vocab=30, tgt_vocab=25):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, src_vocab, (n,), generator=g).tolist() for n in (7, 3, 9, 5)]
    tgt = [torch.randint(4, tgt_vocab, (n,), generator=g).tolist() for n in (6, 8, 2, 5)]
    return collate(src, tgt, list(range(4)))


def _grads(model, batch, need_weights, use_steps, monkeypatch, attention=GlobalAttention):
    if not use_steps:  # the decoder then calls the attention module once per step
        monkeypatch.setattr(attention_steps, "steps_for", lambda attention, memory: None)
    model.zero_grad()
    logits, weights = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=need_weights)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)
    if need_weights:  # a loss on the attention weights too (e.g. alignment supervision)
        loss = loss + (weights**2).sum()
    loss.backward()
    monkeypatch.undo()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_step_attention_gradients_equal_plain_ones(monkeypatch):
    for score in ("dot", "general"):
        for need_weights in (False, True):
            torch.manual_seed(0)
            cfg = ModelConfig(layers=2, hidden=16, embed=8, score=score, dropout=0.0)
            model = Seq2Seq(cfg, 30, 25, init_uniform=0.3).double()
            batch = _batch()
            logits_a, plain = _grads(model, batch, need_weights, False, monkeypatch)
            logits_b, fast = _grads(model, batch, need_weights, True, monkeypatch)
            assert torch.equal(logits_a, logits_b)
            for name in plain:
                torch.testing.assert_close(fast[name], plain[name], rtol=1e-10, atol=1e-12)
            assert fast["encoder.embedding.weight"].abs().sum() > 0  # reached the memory


def test_local_step_attention_gradients_equal_plain_ones(monkeypatch):
    """local-m and local-p, both compositions, windows running past the ends of sentences of
    lengths 7, 3, 9, 5: the memory's gradient scattered once for all steps, and W_p's and W_a's
    formed once (StepLinear), are the plain ones."""
    for attention, composition, score in [("local-p", "paper", "general"), ("local-p", "inside", "dot"),
                                          ("local-m", "paper", "dot")]:
        for need_weights in (False, True):
            torch.manual_seed(0)
            cfg = ModelConfig(layers=2, hidden=16, embed=8, attention=attention, score=score,
                              window=2, local_composition=composition, dropout=0.0)
            model = Seq2Seq(cfg, 30, 25, init_uniform=0.3).double()
            batch = _batch()
            logits_a, plain = _grads(model, batch, need_weights, False, monkeypatch, LocalAttention)
            logits_b, fast = _grads(model, batch, need_weights, True, monkeypatch, LocalAttention)
            assert torch.equal(logits_a, logits_b)
            for name in plain:
                torch.testing.assert_close(fast[name], plain[name], rtol=1e-10, atol=1e-12)
            assert fast["encoder.embedding.weight"].abs().sum() > 0  # reached the memory


def test_cached_step_weights_follow_updates():
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8), 30, 25, init_uniform=0.3).eval()
    batch = _batch()
    before = beam_search(model, batch.src, batch.src_lengths, beam_size=3)
    with torch.no_grad():  # as an optimizer step would: in place
        for p in model.decoder.rnn.parameters():
            p.mul_(-1.5)
    after = beam_search(model, batch.src, batch.src_lengths, beam_size=3)
    fresh = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8), 30, 25).eval()
    fresh.load_state_dict(model.state_dict())
    expected = beam_search(fresh, batch.src, batch.src_lengths, beam_size=3)
    assert [h[0].tokens for h in after] == [h[0].tokens for h in expected]
    assert [h[0].tokens for h in after] != [h[0].tokens for h in before]


@pytest.mark.parametrize("attention", ["global", "local-p"])
def test_cached_decoding_weights_follow_fused_adam_between_evaluations(attention):
    """torch's fused Adam updates parameters in place without bumping their version counters; a
    train → eval round trip (as the trainer's validation does) still decodes with the new weights
    (the decoder's packed weights, local-p's predictor tables): the same perplexity and search as
    a fresh copy of the updated model."""
    from attnmt.train.training import perplexity

    torch.manual_seed(0)
    cfg = ModelConfig(layers=2, hidden=16, embed=8, attention=attention, score="general", input_feed=True,
                      dropout=0.0, window=2)
    model = Seq2Seq(cfg, 30, 25, init_uniform=0.3)
    batch = _batch()
    src = [row[: int(n)].tolist() for row, n in zip(batch.src, batch.src_lengths)]
    tgt = [[5, 6, 7], [8, 9], [10], [11, 12, 13, 14]]
    perplexity(model, src, tgt, torch.device("cpu"))  # fills the decoding caches, back in train mode
    lstm_steps.inference_weights(model.decoder)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, fused=True)
    for _ in range(3):  # training: the fused path (global general + input feeding on CPU)
        optimizer.zero_grad()
        model.token_loss(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, 0.0).backward()
        optimizer.step()
    fresh = Seq2Seq(cfg, 30, 25)
    fresh.load_state_dict(model.state_dict())
    want = perplexity(fresh, src, tgt, torch.device("cpu"))["ppl"]
    assert perplexity(model, src, tgt, torch.device("cpu"))["ppl"] == want
    model.eval(), fresh.eval()
    got = beam_search(model, batch.src, batch.src_lengths, beam_size=3)
    expected = beam_search(fresh, batch.src, batch.src_lengths, beam_size=3)
    assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]


def test_beam_search_of_a_sentence_does_not_depend_on_its_batch():
    # sentences finish at different steps and leave the batch; each alone must match
    torch.manual_seed(3)
    model = Seq2Seq(ModelConfig(layers=2, hidden=16, embed=8), 30, 12, init_uniform=0.5).eval()
    with torch.no_grad():
        model.decoder.W_s.bias[3] += 1.5  # </s> likely: hypotheses end at varied lengths
    batch = _batch(tgt_vocab=12)
    together = beam_search(model, batch.src, batch.src_lengths, beam_size=4, nbest=3,
                           need_weights=True)
    for i in range(batch.src.size(0)):
        n = int(batch.src_lengths[i])
        alone = beam_search(model, batch.src[i : i + 1, :n], batch.src_lengths[i : i + 1],
                            beam_size=4, nbest=3, need_weights=True)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        for a, b in zip(alone, together[i]):
            assert abs(a.score - b.score) < 1e-5
            torch.testing.assert_close(a.attention, b.attention[:, :n])
