"""Data-parallel training: ``torchrun --nproc-per-node 2 -m attnmt train`` (gloo, CPU) equals one
process with gradient accumulation.

Why this equivalence is exact: each epoch's batch list is a pure function of (seed, epoch); rank r
of W takes batches[r::W]. With ``train.loss_norm=sents`` and equal-size batches of B sentences,
step k on 2 ranks averages the gradients of batches 2k and 2k+1, each normalised by B:
    ½ (∇L_{2k}/B + ∇L_{2k+1}/B) = (∇L_{2k} + ∇L_{2k+1}) / 2B,
which is what one process computes with ``train.accumulate=2`` (normaliser: all 2B sentences of
the step). Parameters start equal (DDP broadcasts rank 0's, initialised with the same seed) and
dropout is 0, so the runs differ only by float rounding. (A doubled batch of 2B sentences is *not*
exact: the length buckets would differ. Token-normalised loss is not exact either: the ranks'
token counts differ.) The two equal runs also keep an EMA of the weights (train.ema): the average
of equal parameters is equal, and rank 0 saves it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnmt.runs.checkpoint import find_checkpoint, load_weights
from attnmt.train.run import run_training

ROOT = Path(__file__).resolve().parents[1]
STEPS = 8
COMMON = [
    "train.batch_size=16",
    "train.loss_norm=sents",
    f"train.max_steps={STEPS}",
    "train.epochs=1",
    "train.log_every=1",
    "train.save_every=0",
]
EMA = ["train.ema=0.9"]  # the DDP run and its one-process equal


def _run_inprocess(config: Path, out: Path, overrides: list[str]) -> None:
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(config), str(out), overrides, resume=False)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def runs(tiny_corpus, tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    ddp = base / "ddp2"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "attnmt",
        "train",
        str(tiny_corpus.config),
        "--out",
        str(ddp),
    ]
    for o in COMMON + EMA:
        cmd += ["--set", o]
    proc = subprocess.run(
        cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    accum = base / "accum2"
    _run_inprocess(tiny_corpus.config, accum, COMMON + EMA + ["train.accumulate=2"])
    single = base / "single"  # half the data per step: must *not* match
    _run_inprocess(tiny_corpus.config, single, COMMON)
    return ddp, accum, single


def test_two_processes_equal_one_process_with_accumulation(runs):
    ddp, accum, single = runs
    w_ddp = load_weights(find_checkpoint(ddp, "last") / "model.safetensors")
    w_acc = load_weights(find_checkpoint(accum, "last") / "model.safetensors")
    w_one = load_weights(find_checkpoint(single, "last") / "model.safetensors")
    assert _max_diff(w_ddp, w_acc) < 1e-5  # measured: 0.0 (bitwise equal) on gloo/CPU
    assert _max_diff(w_ddp, w_one) > 1e-3  # measured: 0.02; the comparison can tell them apart

    valid = {
        name: [e for e in _events(r) if e["event"] == "valid"][-1]
        for name, r in (("ddp", ddp), ("acc", accum), ("one", single))
    }
    assert valid["ddp"]["step"] == valid["acc"]["step"] == STEPS
    assert valid["ddp"]["loss"] == pytest.approx(valid["acc"]["loss"], abs=1e-5)
    assert abs(valid["ddp"]["loss"] - valid["one"]["loss"]) > 1e-3  # measured: 0.005


def test_the_ema_of_two_processes_equals_one_process_with_accumulation(runs):
    ddp, accum, _ = runs
    a = load_weights(find_checkpoint(ddp, "last") / "ema.safetensors")
    b = load_weights(find_checkpoint(accum, "last") / "ema.safetensors")
    assert _max_diff(a, b) < 1e-5
    raw = load_weights(find_checkpoint(ddp, "last") / "model.safetensors")
    assert _max_diff(a, raw) > 1e-3  # the average, not a copy of the weights


def test_only_rank_zero_writes(runs):
    ddp, _, _ = runs
    events = _events(ddp)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 1 and starts[0]["world"] == 2
    assert [e["event"] for e in events].count("end") == 1
    assert [e["step"] for e in events if e["event"] == "train"] == list(range(1, STEPS + 1))
    ckpt = ddp / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["BEST", "LAST", f"step-{STEPS:08d}"]
