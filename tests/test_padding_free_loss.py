"""Seq2Seq.token_loss (the output layer on non-padding target positions only) equals the
cross-entropy over the model's (B, T, V) logits (float64: to 1e-10; float32: token_loss itself),
loss and every gradient; the trainer uses it for a plain Seq2Seq and not for wrapped models."""

import copy

import pytest
import torch
import torch.nn.functional as F

from attnmt.config import ModelConfig, load_config
from attnmt.data.batching import collate
from attnmt.data.vocab import PAD
from attnmt.models.seq2seq import Seq2Seq
from attnmt.ngram.residual import NgramResidual
from attnmt.train.training import Trainer, token_loss


def _batch(seed, src_vocab=30, tgt_vocab=25, src_lens=(7, 3, 9, 5), tgt_lens=(6, 8, 1, 5)):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, src_vocab, (n,), generator=g).tolist() for n in src_lens]
    tgt = [torch.randint(4, tgt_vocab, (n,), generator=g).tolist() for n in tgt_lens]
    return collate(src, tgt, list(range(len(src))))


def _loss_and_grads(model, loss_fn, seed=0):
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks on both sides
    loss = loss_fn()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _full_loss(model, b, smoothing):
    """token_loss over all B·T logits, in the model's precision (token_loss casts to float32)."""
    logits, _ = model(b.src, b.src_lengths, b.tgt_in)  # (B, T, V)
    return F.cross_entropy(
        logits.flatten(0, 1),
        b.tgt_out.flatten(),
        ignore_index=PAD,
        reduction="sum",
        label_smoothing=smoothing,
    )


@pytest.mark.parametrize("attention", ["none", "global", "local-p"])
@pytest.mark.parametrize("input_feed", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_token_loss_equals_loss_over_full_logits(attention, input_feed, smoothing, dropout):
    torch.manual_seed(1)
    cfg = ModelConfig(
        layers=2,
        hidden=16,
        embed=8,
        attention=attention,
        score="general",
        input_feed=input_feed,
        dropout=dropout,
    )
    model = Seq2Seq(cfg, 30, 25, init_uniform=0.3).double().train()
    b = _batch(2)
    want_loss, want = _loss_and_grads(model, lambda: _full_loss(model, b, smoothing))
    got_loss, got = _loss_and_grads(
        model, lambda: model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, smoothing)
    )
    torch.testing.assert_close(got_loss, want_loss, atol=1e-10, rtol=0)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-10, rtol=0, msg=name)


def test_token_loss_float32_and_all_equal_lengths():
    torch.manual_seed(3)
    model = Seq2Seq(ModelConfig(layers=1, hidden=16, embed=8, dropout=0.0), 30, 25, 0.3)
    b = _batch(4, src_lens=(5, 5, 5), tgt_lens=(4, 4, 4))  # no padding at all
    want_loss, want = _loss_and_grads(
        model, lambda: token_loss(model(b.src, b.src_lengths, b.tgt_in)[0], b.tgt_out)
    )
    got_loss, got = _loss_and_grads(
        model, lambda: model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out)
    )
    torch.testing.assert_close(got_loss, want_loss, atol=1e-4, rtol=1e-6)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=0, msg=name)


def test_the_ngram_head_does_not_expose_the_networks_fused_loss():
    # NgramResidual is an explicit head, no proxy: the network's fused loss (which has no n-gram
    # term) is not reachable through it, so the trainer's loss comes from the head's forward
    model = Seq2Seq(ModelConfig(layers=1, hidden=8, embed=8), 30, 25)
    wrapped = NgramResidual(model, ngram=None)
    assert getattr(model, "token_loss", None) is not None
    assert getattr(wrapped, "token_loss", None) is None
    assert getattr(type(wrapped), "token_loss", None) is None
    assert "__getattr__" not in vars(NgramResidual)


def test_trainer_step_equals_the_plain_loss_path(tiny_corpus, tmp_path, monkeypatch):
    threads = torch.get_num_threads()
    cfg = load_config(
        tiny_corpus.config,
        ["model.dropout=0.3", "model.layers=2", "train.label_smoothing=0.1"],
    )
    trainer = Trainer(cfg, tmp_path / "run")
    torch.set_num_threads(threads)
    vs, vt = len(trainer.data.src_tok), len(trainer.data.tgt_tok)
    batches = [_batch(5, vs, vt), _batch(6, vs, vt, tgt_lens=(2, 9, 3, 3))]
    model0 = copy.deepcopy(trainer.model.state_dict())
    opt0 = copy.deepcopy(trainer.optimizer.state_dict())

    def one_step():
        trainer.model.load_state_dict(model0)
        trainer.optimizer.load_state_dict(opt0)
        trainer.step = 0
        torch.manual_seed(7)
        loss, tokens = trainer.train_step(batches)
        return loss, tokens, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}

    calls = []
    fused = Seq2Seq.token_loss
    monkeypatch.setattr(Seq2Seq, "token_loss", lambda *a: calls.append(1) or fused(*a))
    got = one_step()
    assert len(calls) == len(batches)  # the fused path ran
    monkeypatch.delattr(Seq2Seq, "token_loss")
    monkeypatch.setattr(trainer.updater, "fused_loss", False)  # decided when the trainer was built
    want = one_step()
    assert got[1] == want[1]
    assert abs(got[0] - want[0]) < 1e-4 * abs(want[0])
    for name in want[2]:
        torch.testing.assert_close(got[2][name], want[2][name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("lm", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_transformer_token_loss_equals_loss_over_full_logits(lm, smoothing):
    """Transformer / TransformerLM.token_loss: the output layer on non-padding rows through
    fused_loss, equal to the cross-entropy of forward's logits, dropout (same masks) included."""
    from attnmt.config import Config
    from attnmt.models import build_model

    torch.manual_seed(5)
    cfg = Config(model=ModelConfig(type="transformer"))
    cfg.task = "lm" if lm else "translate"
    m = cfg.model
    m.layers, m.hidden, m.heads, m.ff, m.dropout = 2, 16, 4, 32, 0.3
    model = build_model(cfg, 30, 30).double().train()
    b = _batch(3, 30, 30)
    want_loss, want = _loss_and_grads(model, lambda: _full_loss(model, b, smoothing), seed=11)
    got_loss, got = _loss_and_grads(
        model, lambda: model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, smoothing), seed=11
    )
    torch.testing.assert_close(got_loss, want_loss, atol=1e-10, rtol=0)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-10, rtol=0, msg=name)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_rows_loss_without_gradient_goes_by_blocks_of_rows_to_the_same_sum(smoothing):
    from attnmt.models.common import rows_loss

    torch.manual_seed(3)
    output = torch.nn.Linear(8, 11).double()
    h, target = torch.randn(37, 8, dtype=torch.float64), torch.randint(0, 11, (37,))
    whole = F.cross_entropy(output(h), target, reduction="sum", label_smoothing=smoothing)
    seen = []
    with torch.no_grad():
        blocks = rows_loss(lambda x: seen.append(x.size(0)) or output(x), h, target, smoothing, rows=10)
    assert seen == [10, 10, 10, 7]  # never more than `rows` logits rows at once
    assert torch.allclose(blocks, whole, rtol=1e-12, atol=0)


def test_dev_perplexity_by_token_loss_equals_the_full_logits_one():
    import math

    from attnmt.train.validation import perplexity

    torch.manual_seed(2)
    model = Seq2Seq(ModelConfig(layers=1, hidden=16, embed=8, attention="global", dropout=0.0), 30, 25).double()
    g = torch.Generator().manual_seed(5)
    src = [torch.randint(4, 30, (int(n),), generator=g).tolist() for n in torch.randint(1, 12, (40,), generator=g)]
    tgt = [torch.randint(4, 25, (int(n),), generator=g).tolist() for n in torch.randint(1, 12, (40,), generator=g)]
    got = perplexity(model, src, tgt, torch.device("cpu"), batch_tokens=60)
    b = collate(src, tgt, list(range(len(src))))
    with torch.no_grad():
        full = float(_full_loss(model, b, 0.0))
    assert got["tokens"] == b.target_tokens
    assert math.isclose(got["loss"], full / b.target_tokens, rel_tol=1e-10)
