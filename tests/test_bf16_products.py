"""bfloat16 products in CPU training (kernels/packed.py ``bf16_products``): the products take
bfloat16 roundings of their operands and return float32, only inside the block; the fused LSTM
loss keeps its gradients close to float32's; row processes follow the parent's setting; the
trainer turns it on for train.amp only on a CPU with bfloat16 units."""

import sys

import pytest
import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.kernels import packed
from attnmt.kernels.packed import bf16_enabled, bf16_products, linear, linear_add, mm, pack, product
from attnmt.models.seq2seq import Seq2Seq
from attnmt.train.row_groups import split_rows

ONEDNN_BF16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _rounded(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).double()


def test_products_round_their_operands_only_inside_the_block():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)
    w, bias = torch.randn(3, 7, generator=g), torch.randn(3, generator=g)
    exact = (a.double() @ b.double()).float()
    rounded = (_rounded(a) @ _rounded(b)).float()
    assert not torch.allclose(exact, rounded, atol=1e-4, rtol=0)  # rounding shows at this size
    torch.testing.assert_close(mm(a, b), exact, atol=1e-5, rtol=1e-5)
    with bf16_products():
        assert bf16_enabled()
        got = mm(a, b)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, rounded, atol=2e-2, rtol=1e-2)  # result rounded once more
        assert (got - exact).abs().max() > (got - rounded).abs().max()
        y = product(a, w, bias)
        torch.testing.assert_close(y, (_rounded(a) @ _rounded(w).t()).float() + bias, atol=2e-2, rtol=1e-2)
    assert not bf16_enabled()
    torch.testing.assert_close(product(a, w, bias), a @ w.t() + bias, atol=1e-5, rtol=1e-5)


def test_product_gradients_flow_to_float32_parameters():
    w = torch.nn.Parameter(torch.randn(4, 6))
    x = torch.randn(3, 6, requires_grad=True)
    with bf16_products():
        product(x, w).square().sum().backward()
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    y = x.detach() @ w.detach().t()
    torch.testing.assert_close(w.grad, 2 * y.t() @ x.detach(), atol=0.1, rtol=0.05)


@pytest.mark.skipif(not ONEDNN_BF16, reason="oneDNN without bfloat16 on this CPU")
def test_packed_weights_in_bfloat16_inside_the_block():
    g = torch.Generator().manual_seed(1)
    x, w, other = torch.randn(4, 16, generator=g), torch.randn(8, 16, generator=g), torch.randn(4, 8, generator=g)
    with bf16_products():
        p = pack(w, 4)
        assert p.packed is not None and p.packed.dtype == torch.bfloat16
        want = (_rounded(x) @ _rounded(w).t()).float()
        torch.testing.assert_close(linear(x, p), want, atol=3e-2, rtol=1e-2)
        torch.testing.assert_close(linear_add(x, p, other), want + other, atol=3e-2, rtol=1e-2)
    assert pack(w, 4).packed is None or pack(w, 4).packed.dtype == torch.float32


def _model():
    torch.manual_seed(3)
    cfg = ModelConfig(layers=2, hidden=16, embed=8, attention="global", score="general", input_feed=True,
                      dropout=0.0)
    return Seq2Seq(cfg, 30, 28, init_uniform=0.3).train()


def _batch():
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(4, 30, (n,), generator=g).tolist() for n in (5, 9, 7, 3)]
    tgt = [torch.randint(4, 28, (n,), generator=g).tolist() for n in (6, 8, 2, 7)]
    return collate(src, tgt, list(range(4)))


def _grads(model, b):
    model.zero_grad(set_to_none=True)
    loss = model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, 0.1)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.skipif(not ONEDNN_BF16, reason="oneDNN without bfloat16 on this CPU")
def test_fused_lstm_loss_and_gradients_stay_close_to_float32():
    model, b = _model(), _batch()
    loss32, g32 = _grads(model, b)
    with bf16_products():
        loss16, g16 = _grads(model, b)
    assert loss16 != loss32 and abs(loss16 - loss32) < 2e-3 * abs(loss32)
    for name, want in g32.items():
        got = g16[name]
        assert got.dtype == torch.float32
        # relative to the gradient's size: bfloat16 keeps 8 bits of each operand
        assert (got - want).norm() <= 0.03 * want.norm() + 1e-6, name


@pytest.mark.skipif(not (ONEDNN_BF16 and sys.platform.startswith("linux")), reason="bf16 row processes")
def test_row_processes_follow_the_parents_setting():
    from attnmt.train.row_processes import RowProcesses

    model, b = _model(), _batch()
    parts = split_rows(b, 2)
    with bf16_products():  # the same two parts in this process
        want = {}
        for part in parts:
            _, g = _grads(model, part)
            want = {n: want.get(n, 0) + g[n] for n in g}
    with RowProcesses(model, 1) as rows:
        model.zero_grad(set_to_none=True)
        with bf16_products():
            rows.backward(b, 1.0, 0.1)
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-5, rtol=1e-5, msg=n)
        model.zero_grad(set_to_none=True)
        rows.backward(b, 1.0, 0.1)  # float32 again, in both processes
        _, g32 = _grads(model, b)
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, g32[n], atol=1e-5, rtol=0, msg=n)


@pytest.mark.parametrize("amp, native, want", [(True, True, True), (False, True, False), (True, False, False)])
def test_trainer_uses_bf16_products_for_amp_on_bf16_cpus_only(tiny_corpus, tmp_path, monkeypatch, amp, native, want):
    from attnmt.config import load_config
    from attnmt.train import training, update

    monkeypatch.setattr(update, "native_bf16", lambda: native)
    seen = []
    real = packed.bf16_enabled

    def one_update(self, batches, lr, step):
        seen.append(real())
        return 0.0, 1

    monkeypatch.setattr(update.Updater, "_update", one_update)
    cfg = load_config(tiny_corpus.config, [f"train.amp={str(amp).lower()}", "train.device=cpu"])
    trainer = training.Trainer(cfg, tmp_path / "run")
    assert trainer.updater.cpu_bf16 is want
    trainer.train_step([])
    assert seen == [want] and not packed.bf16_enabled()


class _Run:  # what use_bf16_products reads of a loaded run
    def __init__(self, model, device="cpu"):
        self.model, self.network, self.device = model, model, torch.device(device)


def _transformer():
    from attnmt.models.transformer import Transformer

    cfg = ModelConfig(type="transformer", layers=1, hidden=16, heads=2, ff=32)
    return Transformer(cfg, 30, 40).eval()


def _lstm_lm():
    from attnmt.models.lm import LSTMLM

    return LSTMLM(ModelConfig(layers=1, hidden=16, embed=8), 40).eval()


def _eval_model(**overrides) -> Seq2Seq:
    settings = dict(layers=2, hidden=16, embed=8, attention="global", score="general", input_feed=True)
    torch.manual_seed(1)
    return Seq2Seq(ModelConfig(**{**settings, **overrides}), 30, 40, init_uniform=0.3).eval()


@pytest.mark.skipif(not ONEDNN_BF16, reason="oneDNN without bfloat16 on this CPU")
def test_bf16_search_step_moves_logits_only_by_rounding(monkeypatch):
    from attnmt.decode import translate

    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    model = _eval_model()
    src, lengths = torch.randint(4, 30, (3, 7)), torch.tensor([7, 5, 2])
    prefix = torch.full((3, 1), 1, dtype=torch.long)

    def step():
        with torch.no_grad():
            enc = model.encode(src, lengths)
            return model.step(prefix, model.init_state(enc), enc)

    want_logits, want_state, _ = step()
    translate.use_bf16_products([_Run(model)])
    assert model.decoder.bf16_search
    logits, state, _ = step()
    assert not torch.equal(logits, want_logits) and logits.dtype == torch.float32
    assert (logits - want_logits).abs().max() < 0.03 * (want_logits.max() - want_logits.min())
    torch.testing.assert_close(state["h"], want_state["h"], atol=0.03, rtol=0)


def test_bf16_search_refuses_cpus_without_bfloat16_units_and_other_models(monkeypatch):
    from attnmt.decode import translate
    from attnmt.errors import UserError

    monkeypatch.setattr(packed, "native_bf16", lambda: False)
    with pytest.raises(UserError, match="bfloat16 units"):
        translate.use_bf16_products([_Run(_eval_model())])
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    with pytest.raises(UserError, match="LSTM decoders and Transformers"):
        translate.use_bf16_products([_Run(_lstm_lm())])


def test_bf16_search_switches_every_packed_linear_of_a_transformer(monkeypatch):
    from attnmt.decode import translate

    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    model = _transformer()
    linears = [m for m in model.modules() if isinstance(m, packed.PackedLinear)]
    # encoder layer: self-attention's q, k, v, o and the feed-forward's two; decoder layer: the
    # same and cross-attention's four; the output layer
    assert len(linears) == 6 + 10 + 1
    assert not any(m.bf16_search for m in linears)
    translate.use_bf16_products([_Run(model)])
    assert all(m.bf16_search for m in linears)


def test_translate_searches_in_bf16_by_default_only_where_it_applies(monkeypatch):
    from attnmt.decode import translate

    runs = [_Run(_eval_model())]
    assert not translate.bf16_search_applies(runs)  # conftest: no bfloat16 units
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    assert translate.bf16_search_applies(runs)
    assert translate.bf16_search_applies(runs + [_Run(_transformer())])
    assert not translate.bf16_search_applies(runs + [_Run(_lstm_lm())])  # nothing to switch
    assert translate.bf16_search_applies(runs + [_Run(_eval_model(input_feed=False))])
    assert not translate.bf16_search_applies(runs + [_Run(_eval_model(), "cuda")])
    assert not translate.bf16_search_applies([])


def test_translate_refuses_bf16_with_float32(tiny_run, tiny_corpus, tmp_path):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "attnmt", "translate", "--model", str(tiny_run), "--input",
                           str(tiny_corpus.directory / "dev.en"), "--bf16", "--float32"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--bf16 and --float32" in done.stderr and "Traceback" not in done.stderr


def test_search_precision_is_chosen_once_for_translate_and_serve(monkeypatch):
    from attnmt.decode import translate
    from attnmt.errors import UserError

    runs = [_Run(_eval_model())]
    assert translate.set_search_precision(runs) == "float32"  # conftest: no bfloat16 units
    assert not runs[0].model.decoder.bf16_search
    with pytest.raises(UserError, match="bfloat16 units"):
        translate.set_search_precision(runs, bf16=True)
    with pytest.raises(UserError, match="exclude each other"):
        translate.set_search_precision(runs, bf16=True, float32=True)
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    assert translate.set_search_precision(runs, float32=True) == "float32"
    assert not runs[0].model.decoder.bf16_search
    assert translate.set_search_precision(runs) == "bf16"
    assert runs[0].model.decoder.bf16_search
    plain = [_Run(_lstm_lm())]  # no bf16 search products: float32 by default
    assert translate.set_search_precision(plain) == "float32"
    transformer = [_Run(_transformer())]  # its PackedLinear maps, in bfloat16 by default
    assert translate.set_search_precision(transformer) == "bf16"
    assert all(m.bf16_search for m in transformer[0].model.modules()
               if isinstance(m, packed.PackedLinear))
    unfed = [_Run(_eval_model(input_feed=False))]  # bf16 by default, as with input feeding
    assert translate.set_search_precision(unfed, float32=True) == "float32"
    assert not unfed[0].model.decoder.bf16_search
    assert translate.set_search_precision(unfed) == "bf16"
    assert unfed[0].model.decoder.bf16_search


@pytest.mark.skipif(not ONEDNN_BF16, reason="oneDNN without bfloat16 on this CPU")
def test_bf16_packed_product_adds_its_bias_in_the_product():
    torch.manual_seed(0)
    x, weight = torch.randn(5, 64), torch.randn(300, 64) * 0.1
    bias = torch.linspace(-50, 50, 300)  # large: a lost or doubled bias would show
    got = packed.linear(x, packed.pack(weight, 64, bf16=True), bias)
    want = torch.nn.functional.linear(x, weight, bias)
    assert got.dtype == torch.float32
    # one bfloat16 rounding of the operands and of the result: ~2⁻⁸ of |result| plus the products'
    torch.testing.assert_close(got, want, atol=0.05, rtol=2**-7)
