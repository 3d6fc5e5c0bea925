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
