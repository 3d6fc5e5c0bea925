"""Crash safety of training, for real: SIGKILL a training process right after a checkpoint appears,
resume, and finish with exactly the weights of an uninterrupted run; SIGTERM/SIGINT write a final
checkpoint and exit 0; a kill inside a checkpoint re-save never leaves LAST unusable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnmt.errors import UserError
from attnmt.runs import checkpoint as ckpt_mod
from attnmt.runs.checkpoint import (
    find_checkpoint,
    load_trainer_state,
    load_weights,
    save_checkpoint,
)
from attnmt.train.run import run_training

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20  # the tiny corpus has 16 batches of 32: the run crosses an epoch boundary
OVERRIDES = [
    f"train.max_steps={STEPS}",
    "train.save_every=1",
    "train.log_every=1",
    "train.epochs=3",
]


def _env() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def _start(config: Path, run: Path, overrides: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "attnmt", "train", str(config), "--out", str(run)]
    for o in overrides:
        cmd += ["--set", o]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for training progress")
        time.sleep(0.005)


def _last_step(run: Path) -> int:
    try:
        name = (run / "checkpoints" / "LAST").read_text().strip()
    except FileNotFoundError:
        return -1
    return int(name.split("-")[1]) if name else -1


def _inprocess(config: str | None, run: Path, overrides: list[str], resume: bool) -> dict:
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_training(config, str(run), overrides, resume=resume)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity (Python's accepts them; other readers do not)."""

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON: {text[:200]}")

    return json.loads(text, parse_constant=refuse)


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("extra", [[], ["train.ema=0.9"], ["data.train=WEIGHTED", "train.bucket_pool=100"]],
                         ids=["plain", "ema", "pooled-weighted"])
def test_sigkill_after_a_checkpoint_then_resume_equals_uninterrupted(tiny_corpus, tmp_path, extra):
    """With train.ema the moving average (ema.safetensors) is restored too and ends equal; with a
    corpus of weight 1.5 (a seeded half of it again each epoch) and length pools of 100 sentences
    the batches are as exact."""
    extra = [x.replace("WEIGHTED", f"{tiny_corpus.directory}/train:1.5") for x in extra]
    run = tmp_path / "killed"
    proc = _start(tiny_corpus.config, run, OVERRIDES + extra)
    _wait_for(lambda: _last_step(run) >= 5, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    killed_at = _last_step(run)
    assert 5 <= killed_at < STEPS

    # nothing truncated: every visible checkpoint loads completely
    steps = sorted(p for p in (run / "checkpoints").iterdir() if p.name.startswith("step-"))
    assert steps
    for d in steps:
        load_weights(d / "model.safetensors")
        load_trainer_state(d)
    assert find_checkpoint(run, "last").name == f"step-{killed_at:08d}"

    summary = _inprocess(None, run, [], resume=True)
    assert summary["step"] == STEPS and summary["reason"] == "budget"
    resumed = [e for e in _events(run) if e["event"] == "resume"]
    assert len(resumed) == 1 and resumed[0]["step"] == killed_at  # lost only the work after it

    reference = tmp_path / "reference"  # checkpoints do not touch the trajectory: save fewer
    _inprocess(str(tiny_corpus.config), reference, OVERRIDES + extra + ["train.save_every=0"], resume=False)
    for name in ["model.safetensors"] + (["ema.safetensors"] if "train.ema=0.9" in extra else []):
        a = load_weights(find_checkpoint(run, "last") / name)
        b = load_weights(find_checkpoint(reference, "last") / name)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (name, k)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_write_a_final_checkpoint_and_exit_0(tiny_corpus, tmp_path, sig):
    run = tmp_path / "stopped"
    proc = _start(
        tiny_corpus.config,
        run,
        ["train.max_steps=100000", "train.epochs=1000", "train.log_every=1"],
    )

    def trained_a_few_steps() -> bool:
        log = run / "log.jsonl"
        return log.exists() and log.read_text().count('"event": "train"') >= 3

    _wait_for(trained_a_few_steps, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    end = _events(run)[-1]
    assert end["event"] == "end" and end["reason"] == "signal"
    summary = _strict_json(out.decode().strip().splitlines()[-1])  # no Infinity: no dev ppl yet
    assert summary["step"] == end["step"] and summary["best_dev_ppl"] is None
    for line in (run / "log.jsonl").read_text().splitlines():
        _strict_json(line)
    last = find_checkpoint(run, "last")
    assert last.name == f"step-{end['step']:08d}"
    assert load_trainer_state(last)["step"] == end["step"]
    load_weights(last / "model.safetensors")


def test_kill_while_resaving_a_step_leaves_a_usable_last(tmp_path, monkeypatch):
    """The final checkpoint often re-saves the step of an epoch-end one. Simulate a kill between
    moving the old directory out of the way and renaming the new one in."""
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path, 7, model, {"step": 7})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)

    real_replace = os.replace

    class Killed(BaseException):
        pass

    def replace(src, dst):
        if Path(src).name.startswith(".step-00000007.tmp-"):
            raise Killed  # the process dies before the new directory is in place
        return real_replace(src, dst)

    monkeypatch.setattr(ckpt_mod.os, "replace", replace)
    with pytest.raises(Killed):
        save_checkpoint(tmp_path, 7, model, {"step": 7})
    monkeypatch.setattr(ckpt_mod.os, "replace", real_replace)

    last = find_checkpoint(tmp_path, "last")  # still the complete old checkpoint
    weights = load_weights(last / "model.safetensors")
    assert all(torch.equal(weights[k], before[k]) for k in before)
    assert load_trainer_state(last)["step"] == 7

    for left in (tmp_path / "checkpoints").glob(".step-*"):  # as the resumed process sees them
        left.rename(left.with_name(left.name.rsplit("-", 1)[0] + "-999999999"))
    save_checkpoint(tmp_path, 8, model, {"step": 8})  # the next save cleans up the leftovers
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["LAST", "step-00000008"]
    assert find_checkpoint(tmp_path, "last").name == "step-00000008"


def test_resume_with_only_the_run_directory_before_the_first_checkpoint(tiny_corpus, tmp_path):
    """A run killed after it started (config.yaml written) but before its first checkpoint
    continues with just --out RUN --resume: it starts again from RUN/config.yaml."""
    from attnmt.config import load_config, save_config

    run = tmp_path / "early"
    run.mkdir()
    save_config(load_config(tiny_corpus.config, ["train.max_steps=2", "data.dev="]), run / "config.yaml")
    summary = _inprocess(None, run, [], resume=True)
    assert summary["step"] == 2 and find_checkpoint(run, "last").name == "step-00000002"
    with pytest.raises(UserError, match="nothing to resume"):
        _inprocess(None, tmp_path / "empty", [], resume=True)


def test_a_failed_start_leaves_no_config_and_no_run_directory(tiny_corpus, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="nope.en"):
        _inprocess(str(tiny_corpus.config), run, [f"data.dev={tmp_path / 'nope'}"], resume=False)
    assert not run.exists()
    run.mkdir()  # an empty directory the user made stays, empty
    with pytest.raises(UserError, match="nope.en"):
        _inprocess(str(tiny_corpus.config), run, [f"data.dev={tmp_path / 'nope'}"], resume=False)
    assert run.is_dir() and list(run.iterdir()) == []


def test_a_second_ctrl_c_stops_at_once():
    from types import SimpleNamespace

    from attnmt.train.training import stop_handler

    trainer = SimpleNamespace(stop_requested=False)
    handler = stop_handler(trainer)
    handler(signal.SIGTERM, None)
    handler(signal.SIGTERM, None)  # SIGTERM asks politely, however often
    assert trainer.stop_requested
    trainer.stop_requested = False
    handler(signal.SIGINT, None)
    assert trainer.stop_requested
    with pytest.raises(KeyboardInterrupt):  # main() turns it into exit status 130
        handler(signal.SIGINT, None)


@pytest.fixture
def small_disk(tmpfs):
    """A tmpfs of a few hundred KiB (as root), for a disk that fills up while training; skipped
    where mounting is not allowed."""
    return tmpfs("480k")


def test_a_disk_that_fills_up_while_checkpointing_is_one_line_and_resume_is_exact(tiny_corpus, tmp_path,
                                                                                   small_disk):
    """Checkpoints every update on a disk with room for a few: a one-line error, no checkpoint
    that looks complete and is not, LAST loadable; moved to a larger disk, --resume ends with the
    weights of an uninterrupted run."""
    import shutil

    from attnmt.config import load_config
    from attnmt.train.data import prepare_data

    prepared = tmp_path / "first"
    prepare_data(load_config(tiny_corpus.config), prepared)  # the corpus off the small disk
    extra = [f"data.prepared={prepared}/data", "train.save_every=1", f"train.max_steps={STEPS}",
             "train.epochs=3", "train.log_every=1"]
    run = small_disk / "run"
    proc = _start(tiny_corpus.config, run, extra)
    out, err = proc.communicate(timeout=300)
    lines = err.decode().strip().splitlines()
    errors = [x for x in lines if x.startswith("attnmt: error:")]
    assert proc.returncode == 2 and "Traceback" not in err.decode(), err.decode()[-2000:]
    assert len(errors) == 1 and "No space left on device" in errors[0] and lines[-1] == errors[0]
    last = find_checkpoint(run, "last")
    killed_at = int(last.name.split("-")[1])
    assert 1 <= killed_at < STEPS
    for d in (run / "checkpoints").iterdir():
        if d.name.startswith("step-"):
            load_weights(d / "model.safetensors")
            load_trainer_state(d)
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    summary = _inprocess(None, moved, [], resume=True)
    assert summary["step"] == STEPS
    reference = tmp_path / "reference"
    _inprocess(str(tiny_corpus.config), reference, extra, resume=False)
    a = load_weights(find_checkpoint(moved, "last") / "model.safetensors")
    b = load_weights(find_checkpoint(reference, "last") / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
