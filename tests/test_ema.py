"""train.ema: the moving average follows θ̄ ← d·θ̄ + (1 − d)·θ after every update, validation and
BEST use it, checkpoints save it beside the raw weights, --resume restores it (a stopped and
resumed run ends with the average of an uninterrupted one), and translate/eval load it unless
--raw-weights."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from attnmt.cli.main import main
from attnmt.config import load_config
from attnmt.errors import UserError
from attnmt.runs.checkpoint import EMA_FILE, find_checkpoint, load_weights
from attnmt.runs.loader import load_run
from attnmt.train.ema import EMA
from attnmt.train.run import run_training
from attnmt.train.training import Trainer


def _train(config, run: Path, overrides: list[str], resume: bool = False) -> dict:
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_training(None if resume else str(config), str(run), overrides, resume=resume)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)


def test_the_average_is_the_formula_on_a_two_step_toy_with_tied_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5))
    model[1].weight = model[0].weight  # tied (5, 3): one tensor under two names
    ema = EMA(model, 0.75)
    theta = [{n: p.detach().clone() for n, p in model.state_dict().items()}]
    for _ in range(2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ema.update()
        theta.append({n: p.detach().clone() for n, p in model.state_dict().items()})
    avg = ema.weights()
    for name in theta[0]:
        want = 0.75 * (0.75 * theta[0][name] + 0.25 * theta[1][name]) + 0.25 * theta[2][name]
        assert torch.allclose(avg[name], want, atol=1e-6), name
        assert not torch.allclose(avg[name], theta[2][name]), name  # not the raw weights
    assert torch.equal(avg["0.weight"], avg["1.weight"])
    with ema.applied():
        assert torch.equal(model[1].bias, avg["1.bias"])
    assert torch.equal(model[1].bias, theta[2]["1.bias"])  # the raw weights are back, exactly


def _two_updates(trainer) -> list[dict[str, torch.Tensor]]:
    """The parameters before and after each of two real trainer updates."""
    epoch = trainer._epoch_batches()
    batches = [trainer.data.train.collate(epoch[k], 1, k) for k in range(2)]
    theta = [{n: p.detach().clone() for n, p in trainer.model.named_parameters()}]
    for batch in batches:
        trainer.train_step([batch])
        theta.append({n: p.detach().clone() for n, p in trainer.model.named_parameters()})
    return theta


def test_the_trainer_updates_the_average_after_each_optimizer_step(tiny_corpus, tmp_path):
    cfg = load_config(tiny_corpus.config, ["train.ema=0.5", "train.ema_warmup=false", "train.row_groups=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    theta = _two_updates(trainer)
    avg = trainer.ema.weights()
    for name in theta[0]:
        want = 0.5 * (0.5 * theta[0][name] + 0.5 * theta[1][name]) + 0.5 * theta[2][name]
        assert torch.allclose(avg[name], want, atol=1e-6), name
        assert not torch.equal(avg[name], theta[2][name]), name
    trainer.close()


def test_the_warm_up_decays_with_the_update_count(tiny_corpus, tmp_path):
    """Under train.ema_warmup (the default) update n uses d_n = min(d, (1 + n)/(10 + n))."""
    cfg = load_config(tiny_corpus.config, ["train.ema=0.5", "train.row_groups=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    assert [trainer.ema.decay_at(n) for n in (1, 2, 8, 9, 100)] == [2 / 11, 3 / 12, 9 / 18, 0.5, 0.5]
    theta = _two_updates(trainer)
    avg = trainer.ema.weights()
    d1, d2 = 2 / 11, 3 / 12
    for name in theta[0]:
        want = d2 * (d1 * theta[0][name] + (1 - d1) * theta[1][name]) + (1 - d2) * theta[2][name]
        assert torch.allclose(avg[name], want, atol=1e-6), name
    trainer.close()


def test_validation_uses_the_average_and_checkpoints_save_it(tiny_corpus, tmp_path, monkeypatch):
    from attnmt.train import validation

    seen = []

    def ppl(model, src, tgt, device, autocast=None):
        seen.append({n: p.detach().clone() for n, p in model.state_dict().items()})
        return {"loss": 1.0, "ppl": 2.0, "tokens": 1}

    monkeypatch.setattr(validation, "perplexity", ppl)
    run = tmp_path / "ema"
    _train(tiny_corpus.config, run, ["train.max_steps=3", "train.valid_every=3", "train.ema=0.9"])
    ckpt = find_checkpoint(run, "best")
    raw, avg = load_weights(ckpt / "model.safetensors"), load_weights(ckpt / EMA_FILE)
    assert raw.keys() == avg.keys() == seen[0].keys()
    assert all(torch.equal(seen[0][k], avg[k]) for k in avg)  # validated: the average
    assert any(not torch.equal(raw[k], avg[k]) for k in avg)


def test_a_resumed_run_ends_with_the_average_of_an_uninterrupted_one(tiny_corpus, tmp_path):
    common = ["train.ema=0.8", "train.save_every=3", "train.epochs=3"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    _train(tiny_corpus.config, whole, ["train.max_steps=20", *common])  # crosses an epoch boundary
    _train(tiny_corpus.config, parts, ["train.max_steps=9", *common])
    _train(None, parts, ["train.max_steps=20"], resume=True)
    for name in ("model.safetensors", EMA_FILE):
        a = load_weights(find_checkpoint(whole, "last") / name)
        b = load_weights(find_checkpoint(parts, "last") / name)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_translate_and_eval_load_the_average_unless_raw_weights(tiny_corpus, tmp_path, capsys):
    run = tmp_path / "ema"
    _train(tiny_corpus.config, run, ["train.max_steps=4", "train.ema=0.9"])
    ckpt = find_checkpoint(run, "best")
    loaded, raw = load_run(run), load_run(run, raw_weights=True)
    assert loaded.weights == EMA_FILE and raw.weights == "model.safetensors"
    ema = load_weights(ckpt / EMA_FILE)
    assert all(torch.equal(v, ema[k]) for k, v in loaded.model.state_dict().items())
    src = tmp_path / "in.en"
    src.write_text("the red cat sees a dog\n")
    capsys.readouterr()
    assert main(["translate", "--model", str(run), "-i", str(src), "--beam", "1"]) == 0
    assert "using the EMA weights (ema.safetensors)" in capsys.readouterr().err
    assert main(["translate", "--model", str(run), "-i", str(src), "--beam", "1", "--raw-weights"]) == 0
    assert "EMA" not in capsys.readouterr().err
    import json

    for flags, weights in (([], EMA_FILE), (["--raw-weights"], "model.safetensors")):
        dev = str(tiny_corpus.directory / "dev")
        assert main(["eval", "--model", str(run), "--input", dev, "--json", *flags]) == 0
        assert json.loads(capsys.readouterr().out)["weights"] == weights


@pytest.mark.parametrize("value", ["1.0", "-0.1"])
def test_ema_outside_zero_one_is_refused(tiny_corpus, value):
    with pytest.raises(UserError, match=r"train\.ema"):
        load_config(tiny_corpus.config, [f"train.ema={value}"])
