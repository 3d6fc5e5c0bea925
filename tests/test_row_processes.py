"""A batch's rows split between this process and forked workers (train/row_processes.py): the
gradient of one pass over the whole batch, the parent's updates seen by the workers, failures
reported, and the trainer using it on CPU when train.row_workers = processes."""

import os
import signal
import sys

import pytest
import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.models.seq2seq import Seq2Seq
from attnmt.train.row_processes import RowProcesses, supported

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="row processes: Linux only")


def _model():
    torch.manual_seed(1)
    cfg = ModelConfig(layers=2, hidden=12, embed=8, attention="global", score="general", input_feed=True,
                      dropout=0.0)
    return Seq2Seq(cfg, 20, 18, init_uniform=0.3).train()


def _batch(rows=6, bad_row=None):
    """Six pairs; ``bad_row``: that row's target ids made out of the vocabulary (same length)."""
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (5, 2, 7, 3, 6, 4)[:rows]]
    tgt = [torch.randint(4, 18, (n,), generator=g).tolist() for n in (3, 8, 2, 6, 1, 5)[:rows]]
    if bad_row is not None:
        tgt[bad_row] = [99] * len(tgt[bad_row])
    return collate(src, tgt, list(range(rows)))


def _one_pass(model, b, scale):
    model.zero_grad(set_to_none=True)
    loss = model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, 0.1)
    (loss * scale).backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("workers", [1, 2])
def test_split_over_processes_equals_one_pass_and_sees_updates(workers):
    model = _model()
    b = _batch()
    want_loss, want = _one_pass(model, b, 0.25)
    threads = torch.get_num_threads()
    with RowProcesses(model, workers) as rows:
        assert rows.parts == workers + 1 and all(p.is_alive() for p in rows.procs)
        model.zero_grad(set_to_none=True)
        loss = rows.backward(b, 0.25, 0.1)
        assert torch.get_num_threads() == threads
        assert abs(loss - want_loss) < 1e-4
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=0, msg=n)
        # an in-place update here (as the optimizer's) is what the workers compute with next
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.9)
        want_loss, want = _one_pass(model, b, 0.25)
        model.zero_grad(set_to_none=True)
        assert abs(rows.backward(b, 0.25, 0.1) - want_loss) < 1e-4
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=0, msg=n)
        # fewer parts than processes (a small batch): the idle worker's gradient is not added
        model.zero_grad(set_to_none=True)
        small = _batch(rows=2)
        loss = rows.backward(small, 1.0, 0.1, parts=2)
        want_loss, want = _one_pass(model, small, 1.0)
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=0, msg=n)
        procs = list(rows.procs)
    for proc in procs:
        assert not proc.is_alive() and proc.exitcode == 0


@pytest.mark.parametrize("workers, bad_row, failing", [(1, 4, 1), (2, 2, 1), (2, 4, 2)])
def test_a_failing_worker_is_reported_and_the_rest_keeps_working(workers, bad_row, failing):
    # rows are dealt by target length (8 6 5 3 2 1 = rows 1 3 5 0 2 4) to parts 0, 1, (2,) 0, ...:
    # the bad row lands in worker ``failing``'s part; the others' answers are read all the same,
    # so the next batch's answers are its own
    model = _model()
    with RowProcesses(model, workers) as rows:
        with pytest.raises(RuntimeError, match=f"row process {failing} failed: IndexError"):
            rows.backward(_batch(bad_row=bad_row), 1.0, 0.1)
        model.zero_grad(set_to_none=True)
        b = _batch()
        loss = rows.backward(b, 1.0, 0.1)
        assert abs(loss - _one_pass(model, b, 1.0)[0]) < 1e-4


def test_a_dead_worker_is_a_clear_error():
    model = _model()
    with RowProcesses(model, 1) as rows:
        os.kill(rows.procs[0].pid, signal.SIGKILL)
        rows.procs[0].join(5)
        with pytest.raises(RuntimeError, match=r"row process 1 stopped \(exit code -9\)"):
            rows.backward(_batch(), 1.0, 0.1)


def test_only_float32_cpu_models_with_a_token_loss():
    assert supported(_model())
    assert not supported(_model().double())
    with pytest.raises(ValueError, match="row processes"):
        RowProcesses(_model().double(), 1)


def test_trainer_trains_with_row_processes_and_stops_them(tiny_corpus, tmp_path, monkeypatch, fixed_update):
    from attnmt.config import load_config
    from attnmt.train import row_groups
    from attnmt.train.training import Trainer

    monkeypatch.setattr(row_groups, "MIN_GROUP_ROWS", 2)
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    cfg = load_config(tiny_corpus.config, ["model.dropout=0.0", "model.layers=2", "train.threads=2",
                                           "train.row_groups=2", "train.max_steps=3"])
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert trainer.updater.row_workers == "processes"
        batch_size = trainer.cfg.train.batch_size
        trainer.cfg.train.batch_size = 3  # no batch can have two groups of MIN_GROUP_ROWS = 2
        assert trainer.updater.start_row_processes() is None
        trainer.cfg.train.batch_size = batch_size
        one_step = fixed_update(trainer)

        got = one_step(2)
        rows = trainer.updater.row_processes
        assert rows is not None and rows.parts == 2
        want = one_step(1)
        assert got[1] == want[1] and abs(got[0] - want[0]) < 1e-4 * abs(want[0])
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], atol=1e-5, rtol=0, msg=name)
        trainer.cfg.train.row_groups = 2
        trainer.step = 0
        summary = trainer.train()  # the whole loop, checkpoints included; stops its processes
        assert summary["step"] == 3 and trainer.updater.row_processes is None
        assert not any(p.is_alive() for p in rows.procs)
    finally:
        trainer.close()
        torch.set_num_threads(threads)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_workers_exit_when_their_parent_is_killed(tmp_path):
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, signal, sys, torch\n"
        "from attnmt.config import ModelConfig\n"
        "from attnmt.models.seq2seq import Seq2Seq\n"
        "from attnmt.train.row_processes import RowProcesses\n"
        "cfg = ModelConfig(layers=1, hidden=8, embed=8, attention='global', score='dot', dropout=0.0)\n"
        "rows = RowProcesses(Seq2Seq(cfg, 20, 18), 2)\n"
        "print(' '.join(str(p.pid) for p in rows.procs), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2

    def running(pid):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 20
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(p) for p in pids)


def test_workers_give_memory_back_every_trim_every_parts(tmp_path, monkeypatch):
    from attnmt.train import row_processes

    marks = tmp_path / "trims"
    monkeypatch.setattr(row_processes, "TRIM_EVERY", 2)  # the fork inherits both
    monkeypatch.setattr(row_processes, "release_freed_memory",
                        lambda: marks.open("a").write(f"{os.getpid()}\n"))
    model = _model()
    b = _batch()
    with RowProcesses(model, 1) as rows:
        for _ in range(5):
            model.zero_grad(set_to_none=True)
            rows.backward(b, 1.0, 0.1)
        worker = rows.procs[0].pid
    # the worker counts the messages it waits for: before the 2nd, 4th and 6th (the close)
    assert marks.read_text().split() == [str(worker)] * 3
