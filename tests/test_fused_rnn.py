"""The hand-written LSTM backward passes (kernels/fused_rnn.py) give autograd's results.

The input-feeding decoder's fused loop and its step loop (StepLoop, for the other attentions) are
checked against the decoder's plain autograd loop (``lstm_steps.steppable`` off) on the loss and every
parameter gradient, and against numerical derivatives (gradcheck) with dropout on. The encoder's fused layer is covered by
tests/test_encoder_steps.py (it is the CPU training path there)."""

import pytest
import torch

from attnmt.config import ModelConfig
from attnmt.kernels import lstm_steps
from attnmt.kernels.fused_rnn import StepLoop, input_feeding_loop, lstm_layer
from attnmt.models.seq2seq import Seq2Seq


def _model(score: str, layers: int, dropout: float = 0.0, attention: str = "global") -> Seq2Seq:
    cfg = ModelConfig(layers=layers, hidden=6, embed=5, attention=attention, score=score,
                      input_feed=True, dropout=dropout, window=2)
    torch.manual_seed(layers)
    return Seq2Seq(cfg, 15, 13, init_uniform=0.4).double()


def _batch():
    torch.manual_seed(7)
    src_lengths = torch.tensor([5, 2, 4])
    src = torch.randint(4, 15, (3, 5))
    src[torch.arange(5) >= src_lengths.unsqueeze(1)] = 0
    tgt_len = torch.tensor([4, 6, 1])
    tgt_in = torch.randint(4, 13, (3, 7))
    tgt_out = torch.randint(4, 13, (3, 7))
    pad = torch.arange(7) >= (tgt_len + 1).unsqueeze(1)
    tgt_in[pad], tgt_out[pad] = 0, 0
    return src, src_lengths, tgt_in, tgt_out


def _loss_and_grads(model: Seq2Seq, need_weights: bool):
    src, src_lengths, tgt_in, tgt_out = _batch()
    model.zero_grad()
    enc = model.encode(src, src_lengths)
    features, state, _ = model.decoder.features(tgt_in, model.init_state(enc), enc["memory"], 0, need_weights)
    keep = tgt_out != 0
    logits = model.decoder.W_s(features[keep])
    loss = torch.nn.functional.cross_entropy(logits, tgt_out[keep], reduction="sum")
    loss.backward()
    return loss.detach(), state, {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same(a, b):
    """Two results of _loss_and_grads agree: loss, final state, every parameter gradient."""
    (loss_a, state_a, grads_a), (loss_b, state_b, grads_b) = a, b
    torch.testing.assert_close(loss_a, loss_b, atol=1e-10, rtol=0)
    for key in ("h", "c", "feed"):
        torch.testing.assert_close(state_a[key], state_b[key], atol=1e-10, rtol=0)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_b:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-10, rtol=0, msg=name)


@pytest.mark.parametrize("score", ["dot", "general", "location"])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_fused_decoder_equals_step_loop(score, layers, monkeypatch):
    monkeypatch.setattr(lstm_steps, "steppable", lambda decoder, memory: False)  # autograd loop
    model = _model(score, layers)
    assert lstm_steps.fusable(model.decoder, model.encode(*_batch()[:2])["memory"], False)
    _assert_same(_loss_and_grads(model, need_weights=False), _loss_and_grads(model, need_weights=True))


@pytest.mark.parametrize("attention,score", [("local-p", "general"), ("local-m", "dot"),
                                             ("global", "concat"), ("global", "general")])
@pytest.mark.parametrize("layers", [1, 3])
def test_step_loop_equals_the_autograd_loop(attention, score, layers, monkeypatch):
    # StepLoop (local and concat attention, or any attention with its weights asked for) forms
    # the weight gradients once for all steps; the plain loop lets autograd add them up
    model = _model(score, layers, attention=attention)
    calls = []
    lstm = StepLoop.lstm
    monkeypatch.setattr(StepLoop, "lstm", lambda self, *a: calls.append(1) or lstm(self, *a))
    stepped = _loss_and_grads(model, need_weights=True)
    assert len(calls) == _batch()[2].size(1)  # one StepLoop step per target position
    monkeypatch.setattr(lstm_steps, "steppable", lambda decoder, memory: False)
    _assert_same(stepped, _loss_and_grads(model, need_weights=True))


@pytest.mark.parametrize("layers", [1, 2])
def test_step_loop_gradcheck_with_dropout(layers):
    """Numerical derivatives of every input of T steps of StepLoop with an attention stand-in
    between them, dropout 0.3 between layers (masks fixed by reseeding each call)."""
    torch.manual_seed(0)
    B, T, H, L = 2, 3, 3, layers
    d = lambda *shape: torch.randn(*shape, dtype=torch.float64, requires_grad=True)  # noqa: E731
    emb_gates, h0, c0, feed0 = d(T, B, 4 * H), d(B, L, H), d(B, L, H), d(B, H)
    mix, w_c = d(H, 2), d(H, 2 + H)  # the stand-in attention, W_c over [c_t (2) ; h_t]
    weights = [d(4 * H, 2 * H) for _ in range(L)]
    biases = [d(4 * H) for _ in range(L - 1)]

    def f(emb_gates, h0, c0, feed0, mix, w_c, *params):
        torch.manual_seed(1)
        loop = StepLoop(list(params[:L]), list(params[L:]), w_c, 0.3, B)
        h, c, feed, out = list(h0.unbind(1)), list(c0.unbind(1)), feed0, []
        for t in range(T):
            h, c = loop.lstm(emb_gates[t], feed, h, c)
            context = torch.tanh(h[-1] @ mix)  # (B, 2): any differentiable function of h_t
            feed = loop.attentional(context, h[-1])
            out.append(feed)
        return torch.stack(out), c[0]

    assert torch.autograd.gradcheck(f, (emb_gates, h0, c0, feed0, mix, w_c, *weights, *biases))


def test_other_attentions_keep_the_step_loop():
    for kind, score in (("global", "concat"), ("local-p", "general"), ("local-m", "dot")):
        cfg = ModelConfig(layers=1, hidden=6, embed=5, attention=kind, score=score, input_feed=True)
        model = Seq2Seq(cfg, 15, 13)
        assert not lstm_steps.fusable(model.decoder, model.encode(*_batch()[:2])["memory"], False), (kind, score)


@pytest.mark.parametrize("layers", [1, 2])
def test_fused_loop_gradcheck_with_dropout(layers):
    """Numerical derivatives of every input, dropout 0.3 (masks fixed by reseeding each call)."""
    torch.manual_seed(0)
    B, T, S, H, L = 2, 3, 4, 3, layers
    d = lambda *shape: torch.randn(*shape, dtype=torch.float64, requires_grad=True)  # noqa: E731
    emb_gates, h0, c0, feed0 = d(T, B, 4 * H), d(B, L, H), d(B, L, H), d(B, H)
    keys, values, w_c = d(B, S, H), d(B, S, H), d(H, 2 * H)
    weights = [d(4 * H, 2 * H) for _ in range(L)]
    biases = [d(4 * H) for _ in range(L - 1)]
    inside = torch.tensor([[True, True, True, False], [True, True, True, True]]).unsqueeze(1)
    bias = d(1, 1, S)  # a location score's b_a, shared by the rows; −inf outside the sentence

    def f(emb_gates, h0, c0, feed0, keys, values, bias, w_c, *params):
        torch.manual_seed(1)
        score_bias = torch.where(inside, bias, float("-inf"))
        return input_feeding_loop(emb_gates, h0, c0, feed0, keys, values, score_bias, w_c,
                                  list(params[:L]), list(params[L:]), 0.3)[0]

    assert torch.autograd.gradcheck(f, (emb_gates, h0, c0, feed0, keys, values, bias, w_c, *weights, *biases))


def test_fused_lstm_layer_gradcheck():
    torch.manual_seed(0)
    proj = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    w_hh = torch.randn(8, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, w: lstm_layer(p, w), (proj, w_hh))  # (S, B, 4H)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_cross_entropy_equals_autograd(smoothing, bias):
    from attnmt.kernels.fused_loss import linear_cross_entropy

    torch.manual_seed(0)
    x = torch.randn(9, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True) if bias else None
    y = torch.randint(0, 11, (9,))
    got = linear_cross_entropy(x, w, b, y, smoothing)
    (got * 0.7).backward()
    grads = [t.grad.clone() for t in (x, w, b) if t is not None]
    for t in (x, w, b):
        if t is not None:
            t.grad = None
    want = torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, w, b), y, reduction="sum",
                                             label_smoothing=smoothing)
    (want * 0.7).backward()
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    for g, t in zip(grads, [t for t in (x, w, b) if t is not None]):
        torch.testing.assert_close(g, t.grad, atol=1e-12, rtol=0)


def test_linear_cross_entropy_refuses_a_second_backward():
    from attnmt.kernels.fused_loss import linear_cross_entropy

    x = torch.randn(3, 4, requires_grad=True)
    loss = linear_cross_entropy(x, torch.randn(6, 4, requires_grad=True), None, torch.tensor([1, 2, 3]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward twice"):
        loss.backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("attention,score", [("global", "general"), ("global", "dot"), ("global", "concat"),
                                             ("global", "location"), ("local-p", "general"), ("none", "dot")])
@pytest.mark.parametrize("gate_table", [True, False])
@pytest.mark.parametrize("input_feed", [True, False])
def test_inference_step_equals_the_generic_step(dtype, attention, score, gate_table, input_feed,
                                                monkeypatch):
    """Seq2Seq.step in eval mode without autograd (lstm_steps.infer_step: packed weights, one product
    per layer, layer 1's embedding gates looked up in a table unless it is too large) gives the
    decoder's generic one-step forward: logits, state and attention."""
    if not gate_table:
        monkeypatch.setattr(lstm_steps, "EMB_GATES_MAX_BYTES", 0)
    cfg = ModelConfig(layers=2, hidden=6, embed=5, attention=attention, score=score,
                      input_feed=input_feed, dropout=0.3)
    torch.manual_seed(3)
    model = Seq2Seq(cfg, 15, 13, init_uniform=0.4).to(dtype).eval()
    with torch.no_grad():
        emb_gates = lstm_steps.inference_weights(model.decoder)[1]
    assert (emb_gates is not None) == gate_table
    src, src_lengths, tgt_in, _ = _batch()
    with torch.no_grad():
        enc = model.encode(src, src_lengths)
        state = model.init_state(enc)
        memory = enc["memory"] if model.has_attention else None
        for t in range(3):
            prefix = tgt_in[:, : t + 1]
            want_logits, want_state, want_w = model.decoder(prefix[:, -1:], state, memory, t, True)
            logits, got_state, w = model.step(prefix, state, enc, need_weights=True)
            tol = 1e-4 if dtype == torch.float32 else 1e-10
            torch.testing.assert_close(logits, want_logits[:, 0], atol=tol, rtol=0)
            for key in ("h", "c", "feed"):
                torch.testing.assert_close(got_state[key], want_state[key], atol=tol, rtol=0)
            if want_w is not None:
                torch.testing.assert_close(w, want_w[:, 0], atol=tol, rtol=0)
            state = got_state


def test_row_topk_equals_torch_topk():
    from attnmt.decode.search import row_topk

    torch.manual_seed(0)
    for V in (8000, 8001, 640, 12800):
        x = torch.randn(37, V)
        x[:, 3] = float("-inf")
        for k in (1, 6, 10):
            got, want = row_topk(x, k), x.topk(k, dim=-1)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (V, k)


def test_log_probs_in_place_equal_log_softmax():
    from attnmt.decode.search import log_probs

    torch.manual_seed(0)
    logits = 4 * torch.randn(33, 8000)
    want = torch.log_softmax(logits, dim=-1)
    assert torch.equal(log_probs(logits.clone()), want)
    assert torch.equal(log_probs(logits.t().contiguous().t()), want)  # not contiguous: a new tensor
    assert torch.equal(log_probs(logits.to(torch.bfloat16)), torch.log_softmax(logits.to(torch.bfloat16).float(), -1))


def test_beam_topk_equals_ranking_every_extension():
    """beam_topk: per sentence, the k best of scores[b, i] + logp[b·K + i, v] over all K·V, as a
    full topk over the sums finds them (rows with a -inf score, as at a search's first step,
    never win while finite ones remain)."""
    from attnmt.decode.search import beam_topk

    torch.manual_seed(0)
    for V in (8000, 8001, 40, 12800):
        for n, K in ((9, 5), (4, 1), (3, 4)):
            logp = torch.log_softmax(3 * torch.randn(n * K, V), dim=-1)
            logp[:, 3] = float("-inf")
            scores = 5 * torch.randn(n, K)
            scores[0, 1:] = float("-inf")
            k = min(2 * K, V)
            values, row, token = beam_topk(logp, scores, k)
            want, j = (scores.unsqueeze(2) + logp.view(n, K, V)).view(n, K * V).topk(k, dim=1)
            assert torch.equal(values, want), (V, n, K)
            assert torch.equal(row, j // V) and torch.equal(token, j % V), (V, n, K)


def test_shared_memory_attention_equals_repeated_memory():
    """Beam search repeats the encoder output per hypothesis; global attention reads one shared
    entry for the K rows of a sentence instead, with the same context and weights."""
    from attnmt.attention import GlobalAttention
    from attnmt.models.common import repeat_rows, select_batch

    torch.manual_seed(0)
    for score in ("dot", "general", "location"):
        att = GlobalAttention(score, 6, 6, max_src_len=9).double()
        values = torch.randn(3, 5, 6, dtype=torch.float64)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
        memory = att.prepare(values, mask)
        shared = repeat_rows(memory, 4)
        copied = select_batch(memory, torch.arange(3).repeat_interleave(4))
        assert shared.rows == 4 and copied.rows == 1 and shared.values.size(0) == 3
        query = torch.randn(12, 1, 6, dtype=torch.float64)
        for a, b in zip(att(query, shared), att(query, copied)):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
        keep = torch.tensor([4, 5, 6, 7, 0, 1, 2, 3])  # whole sentences, as the search drops them
        for a, b in zip(att(query[keep], select_batch(shared, keep)), att(query[keep], copied.select(keep))):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
        rows = torch.tensor([5, 2, 11])  # single rows: the shared memory is copied per row
        for a, b in zip(att(query[rows], shared.select(rows)), att(query[rows], copied.select(rows))):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="oneDNN without bfloat16")
def test_linear_cross_entropy_with_bf16_products_is_the_loss_of_rounded_operands():
    """bf16 products: x and W rounded once in the forward and reused by the backward's products;
    the loss is that of the rounded operands, the gradients theirs up to the gradient's rounding."""
    from attnmt.kernels import packed
    from attnmt.kernels.fused_loss import linear_cross_entropy

    torch.manual_seed(1)
    x = torch.randn(40, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    y = torch.randint(0, 50, (40,))
    with packed.bf16_products():
        got = linear_cross_entropy(x, w, None, y, 0.1)
        got.backward()
    xr = x.detach().bfloat16().double().requires_grad_()
    wr = w.detach().bfloat16().double().requires_grad_()
    want = torch.nn.functional.cross_entropy(xr @ wr.t(), y, reduction="sum", label_smoothing=0.1)
    want.backward()
    torch.testing.assert_close(got.double(), want, atol=0, rtol=1e-3)
    for g, r in ((x.grad, xr.grad), (w.grad, wr.grad)):
        assert g.dtype == torch.float32
        assert (g.double() - r).norm() <= 0.02 * r.norm()
