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
