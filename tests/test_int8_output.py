"""`attnmt translate --int8`: the search's output layer as an 8-bit product (kernels/packed.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from attnmt.config import ModelConfig
from attnmt.errors import UserError
from attnmt.kernels import packed
from attnmt.models.seq2seq import Seq2Seq

needs_int8 = pytest.mark.skipif(not packed.INT8, reason="torch without oneDNN's quantised linear")


@needs_int8
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_int8_product_is_the_float_product_up_to_its_rounding(rows):
    """x Wᵀ + b in 8 bits: each output is off by at most the rounding bound of its row, and the
    inputs of a search step (h̃ in [−1, 1]) keep the error far below the logits' spread."""
    torch.manual_seed(0)
    W, b = torch.randn(300, 48) * 0.2, torch.randn(300)
    x = torch.rand(rows, 48) * 2 - 1
    x[0, 0] = -1.0  # the input's range reaches both ends: its rounding step is 2 / 127
    got = packed.linear(x, packed.pack_int8(W, rows), b)
    want = x @ W.t() + b
    w_step = W.abs().amax(dim=1) / 127  # per row
    x_step = (x.max() - x.min()) / 127
    bound = (0.5 * w_step * x.abs().sum(1, keepdim=True)  # weight rounding, per output
             + 0.5 * x_step * W.abs().sum(1)  # input rounding
             + 0.25 * w_step * x_step * W.size(1) + 1e-4)
    assert got.shape == want.shape
    assert bool(((got - want).abs() <= bound).all())
    assert (got - want).abs().max() < 0.02 * (want.max() - want.min())
    assert not torch.equal(got, want)  # it is a different product, not the float one


@needs_int8
def test_int8_product_of_an_input_without_spread():
    """An all-zero input (range 0) still gives the bias, not a division by zero."""
    W, b = torch.randn(20, 8), torch.randn(20)
    torch.testing.assert_close(packed.linear(torch.zeros(3, 8), packed.pack_int8(W), b), b.expand(3, 20))


@needs_int8
def test_int8_product_of_other_shapes_and_of_non_finite_input():
    W, b = torch.randn(20, 8), torch.randn(20)
    w = packed.pack_int8(W)
    x = torch.rand(2, 3, 8)
    got = packed.linear(x, w, b)
    assert got.shape == (2, 3, 20)
    torch.testing.assert_close(got, packed.linear(x.reshape(6, 8), w, b).view(2, 3, 20))
    x[0, 0, 0] = float("nan")  # a broken state: no rounding step, the float product's NaNs
    assert packed.linear(x, w, b)[0, 0].isnan().all()


def test_pack_int8_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="CPU, float32"):
        packed.pack_int8(torch.randn(4, 3, dtype=torch.float64))


class _Run:  # what use_int8_output_layer reads of a loaded run
    def __init__(self, model, device="cpu"):
        self.model, self.network, self.device = model, model, torch.device(device)


def _model(**overrides) -> Seq2Seq:
    settings = dict(layers=2, hidden=16, embed=8, attention="global", score="general", input_feed=True)
    cfg = ModelConfig(**{**settings, **overrides})
    torch.manual_seed(1)
    return Seq2Seq(cfg, 30, 40, init_uniform=0.3).eval()


@needs_int8
def test_int8_search_step_keeps_the_logits_and_only_the_output_layer_changes():
    from attnmt.decode.translate import use_int8_output_layer

    model = _model()
    src = torch.randint(4, 30, (3, 7))
    lengths = torch.tensor([7, 5, 2])
    prefix = torch.full((3, 1), 1, dtype=torch.long)

    def step():
        with torch.no_grad():
            enc = model.encode(src, lengths)
            return model.step(prefix, model.init_state(enc), enc)

    want_logits, want_state, _ = step()
    use_int8_output_layer([_Run(model)])
    assert model.decoder.int8_output
    logits, state, _ = step()
    for key in ("h", "c", "feed"):  # the recurrent state does not go through the 8-bit product
        torch.testing.assert_close(state[key], want_state[key], atol=1e-6, rtol=0)
    assert not torch.equal(logits, want_logits)
    assert (logits - want_logits).abs().max() < 0.02 * (want_logits.max() - want_logits.min())


def test_int8_refuses_models_without_the_lstm_search_step():
    from attnmt.decode.translate import use_int8_output_layer

    class Other(torch.nn.Module):  # neither an LSTM decoder nor a Transformer
        decoder = None

    with pytest.raises(UserError, match="LSTM decoders"):
        use_int8_output_layer([_Run(Other())])
    if packed.INT8:  # an LSTM decoder without input feeding has the search step too
        plain = _model(input_feed=False)
        use_int8_output_layer([_Run(plain)])
        assert plain.decoder.int8_output


@needs_int8
def test_int8_transformer_search_moves_logits_by_the_rounding_only():
    """A Transformer's --int8: every map of its decoder and its output layer in 8 bits (Q/K/V
    stacked, the ReLU fused into W_1's product), the encoder in float32; and off again as the
    options say."""
    from attnmt.decode.options import SearchOptions
    from attnmt.decode.translate import prepare_search
    from attnmt.models.transformer import Transformer

    torch.manual_seed(1)
    model = Transformer(ModelConfig(type="transformer", layers=2, hidden=16, heads=2, ff=32),
                        30, 40).eval()
    src, lengths = torch.randint(4, 30, (3, 7)), torch.tensor([7, 5, 2])
    prefix = torch.full((3, 1), 1, dtype=torch.long)

    def step():
        with torch.no_grad():
            enc = model.encode(src, lengths)
            return model.step(prefix, model.init_state(enc), enc)[0]

    want = step()
    prepare_search([_Run(model)], SearchOptions(int8=True))
    maps = [m for m in model.modules() if isinstance(m, packed.PackedLinear)]
    assert model.output.int8_search and all(m.int8_search for m in maps)  # the encoder's too
    assert any(m in maps for m in model.encoder.modules())
    got = step()
    assert not torch.equal(got, want)
    assert (got - want).abs().max() < 0.05 * (want.max() - want.min())
    prepare_search([_Run(model)], SearchOptions(), before=SearchOptions(int8=True))
    assert not model.output.int8_search
    torch.testing.assert_close(step(), want, atol=0, rtol=0)


@needs_int8
def test_translate_int8_end_to_end(tiny_run, tiny_corpus, tmp_path):
    """`attnmt translate --int8` writes one translation per input line, and the float search's
    output stays the default."""
    src = tiny_corpus.directory / "dev.en"
    outs = {}
    for flag in ([], ["--int8"]):
        out = tmp_path / f"out{len(flag)}.txt"
        done = subprocess.run([sys.executable, "-m", "attnmt", "translate", "--model", str(tiny_run),
                               "--input", str(src), "--output", str(out), *flag],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        outs[bool(flag)] = out.read_text(encoding="utf-8").splitlines()
    n = len(src.read_text(encoding="utf-8").splitlines())
    assert len(outs[True]) == len(outs[False]) == n
    same = sum(a == b for a, b in zip(outs[True], outs[False]))
    assert same >= 0.8 * n  # rounding moves scores a little, rarely a choice


@needs_int8
def test_served_models_take_int8_too(tiny_run):
    pytest.importorskip("fastapi")
    from attnmt.serve.app import load_models

    (plain,) = load_models([str(tiny_run)], device="cpu")
    (served,) = load_models([str(tiny_run)], device="cpu", int8=True)
    assert served.translator.model.decoder.int8_output
    assert not plain.translator.model.decoder.int8_output  # each load is its own model
    (hyps,) = served.translator.translate(["a"], beam=2)
    assert isinstance(hyps[0].text, str)


@needs_int8
def test_int8_stacked_maps_are_the_maps_one_by_one():
    """packed.products of int8 maps (a decoder's Q/K/V under --int8): one stacked 8-bit product,
    the same numbers as each map's own (the input is rounded over the same range)."""
    torch.manual_seed(0)
    lins = [packed.PackedLinear(16, 12) for _ in range(3)]
    for lin in lins:
        lin.int8_search = True
    x = torch.randn(5, 2, 16)
    with torch.no_grad():
        for got, lin in zip(packed.products(x, lins), lins):
            torch.testing.assert_close(got, lin(x), atol=1e-5, rtol=0)
            assert not torch.allclose(got, torch.nn.functional.linear(x, lin.weight, lin.bias), atol=1e-6)
