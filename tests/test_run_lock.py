"""One writer per run directory (attnmt/runs/lock.py): while one `train` runs, a second `train --out
SAME` and a `train --resume` of it fail at once with one line naming the run and the holder's pid,
exit 2, touching nothing; a lock left by a killed process is free again; train never overwrites
the CONFIG it was given nor an --out holding files it did not write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bad_input_zoo import assert_fails, copy_corpus, listing, train_argv

from attnmt.errors import UserError
from attnmt.runs.lock import LOCK_NAME, RunLock

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _train(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnmt", "train", *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_trainers_on_one_run(tiny_corpus, tmp_path):
    """The first holds the run; a second `train --out SAME` and a `train --resume`, started
    together while it trains, both fail naming its pid; the first then ends normally."""
    run = tmp_path / "run"
    first = _train(str(tiny_corpus.config), "--out", str(run), "--set", "train.max_time=120",
                   "--set", "train.epochs=1000", "--set", "data.dev=")
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints").is_dir() and not (run / "log.jsonl").exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first trainer did not start"
            time.sleep(0.05)
        assert (run / LOCK_NAME).read_text().strip() == str(first.pid)
        config = (run / "config.yaml").read_bytes()
        others = [_train(str(tiny_corpus.config), "--out", str(run)), _train("--out", str(run), "--resume")]
        for other in others:
            out, err = other.communicate(timeout=120)
            lines = err.strip().splitlines()
            assert other.returncode == 2, err
            assert len(lines) == 1 and "Traceback" not in err, err
            assert str(run) in lines[0] and f"pid {first.pid}" in lines[0], lines[0]
            assert out == ""
        assert first.poll() is None  # still training, undisturbed
        assert (run / "config.yaml").read_bytes() == config
    finally:
        first.send_signal(signal.SIGTERM)  # stop after this update, with a checkpoint
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert not (run / LOCK_NAME).exists()  # removed by its holder at the end
    assert not list(run.glob("*.tmp"))


def test_two_trainers_started_together(tiny_corpus, tmp_path):
    """Started at once on a new run: one trains, the other fails in one line (no traceback about a
    missing config.yaml.tmp, as when both wrote the config)."""
    run = tmp_path / "run"
    procs = [_train(str(tiny_corpus.config), "--out", str(run), "--set", "train.max_steps=30",
                    "--set", "data.dev=") for _ in range(2)]
    results = [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=300)]]
    assert sorted(code for code, _, _ in results) == [0, 2], [err[-500:] for _, _, err in results]
    code, out, err = next(r for r in results if r[0] == 2)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and str(run) in err, err
    assert "config.yaml.tmp" not in err and out == ""
    assert not (run / LOCK_NAME).exists() and not list(run.glob("*.tmp"))


def test_a_lock_left_by_a_killed_process_is_free(tmp_path):
    """After kill -9 the file stays (with a dead pid) but the OS released the lock."""
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).write_text("999999999\n")
    with RunLock(run):
        assert (run / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    assert not (run / LOCK_NAME).exists()


def test_a_held_lock_refuses_in_process(tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    argv = train_argv(tmp_path, c)
    run = tmp_path / "run"
    with RunLock(run):
        line = assert_fails(tmp_path, argv, (str(run), f"pid {os.getpid()}", "another process"))
        assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(run), "another process"))
    assert "Traceback" not in line
    with pytest.raises(UserError, match="lock file"):  # a lock file that is no file
        (run / LOCK_NAME).mkdir()
        RunLock(run).acquire()


def test_train_never_overwrites_the_config_it_was_given(tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    argv = train_argv(tmp_path, c)
    run = tmp_path / "run"
    run.mkdir()
    mine = run / "config.yaml"
    mine.write_text("# my notes\n" + Path(argv[1]).read_text())
    text = mine.read_text()
    assert_fails(tmp_path, ["train", str(mine), "--out", str(run)], (str(mine), "own config"))
    assert mine.read_text() == text


def test_train_refuses_an_out_holding_other_files(tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    argv = train_argv(tmp_path, c)
    run = tmp_path / "run"
    run.mkdir()
    (run / "thesis.tex").write_text("years of work\n")
    assert_fails(tmp_path, argv, (str(run), "thesis.tex", "did not write"))
    assert listing(run) == {"thesis.tex"}
