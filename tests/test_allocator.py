"""train/allocator.py: glibc's thresholds set once for CPU training (Linux), nothing elsewhere."""

import sys

import pytest
import torch

from attnmt.train import allocator


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_sets_the_thresholds_once():
    assert allocator.keep_freed_memory() is True
    assert allocator.keep_freed_memory() is True  # idempotent
    # large tensors still allocate, free and compute as before
    a = torch.ones(3 << 20)
    assert float(a.sum()) == 3 << 20


def test_not_linux_does_nothing(monkeypatch):
    monkeypatch.setattr(allocator, "_done", False)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False
    assert allocator.release_freed_memory() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_freed_memory_gives_the_kept_blocks_back():
    import subprocess
    import textwrap

    # in a fresh process: the thresholds stay set for the rest of a process
    code = textwrap.dedent("""
        import torch
        from attnmt.train import allocator

        def rss():
            return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmRSS")) // 1024

        allocator.keep_freed_memory()
        blocks = [torch.ones(1 << 18) for _ in range(400)]  # 400 MB in 1 MB blocks, on the heap
        keep = torch.ones(1)  # allocated last: the heap's top stays in use
        del blocks
        kept = rss()
        released = allocator.release_freed_memory()
        print(kept, rss(), released)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kept, after, released = out.stdout.split()
    assert released == "True"
    assert int(kept) - int(after) > 300  # MB: the freed blocks went back to the system


def test_training_gives_memory_back_every_trim_every_updates(tiny_corpus, tmp_path, monkeypatch):
    import signal

    from attnmt.train import training, update
    from attnmt.train.run import run_training

    calls = {"update": [], "validation": 0}
    monkeypatch.setattr(update, "TRIM_EVERY", 2)
    monkeypatch.setattr(update, "release_freed_memory", lambda: calls["update"].append(1))
    monkeypatch.setattr(training, "release_freed_memory",
                        lambda: calls.__setitem__("validation", calls["validation"] + 1))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    try:
        run_training(str(tiny_corpus.config), str(tmp_path / "run"),
                     ["train.max_steps=7", "train.valid_every=0", "train.row_groups=1"], resume=False)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    assert len(calls["update"]) == 3  # after updates 2, 4 and 6
    assert calls["validation"] == 2  # before and after the final validation
