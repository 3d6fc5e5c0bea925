"""decode/processes.py: batches searched by forked processes give what one process gives, in
order, and a failure in any process reaches the caller."""

from __future__ import annotations

import os

import pytest
import torch

from attnmt.decode import processes
from attnmt.decode.processes import fork_map

pytestmark = pytest.mark.skipif(not processes.fork_applies(2, torch.device("cpu")),
                                reason="needs the fork start method")


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.mark.parametrize("workers", [2, 3])
def test_results_in_order_from_several_processes(workers):
    threads = torch.get_num_threads()
    out = fork_map(_square_with_pid, list(range(40)), workers)
    assert [v for v, _ in out] == [x * x for x in range(40)]
    assert torch.get_num_threads() == threads  # restored
    assert len({pid for _, pid in out}) >= 1 and all(isinstance(p, int) for _, p in out)


def test_a_child_takes_items_when_this_process_is_slow():
    import time

    parent = os.getpid()

    def slow_here(x: int) -> int:
        if os.getpid() == parent:
            time.sleep(0.2)
        return os.getpid()

    pids = fork_map(slow_here, list(range(6)), 2)
    assert parent in pids and len(set(pids)) == 2  # the child took the items the parent did not


class _Unpicklable(Exception):
    def __init__(self, line: int, cap: int):
        super().__init__(f"line {line} cut at {cap}")


def test_failures_in_any_process_are_raised_here():
    def fails(x: int) -> int:
        raise ValueError(f"bad item {x}")

    with pytest.raises(ValueError, match="bad item"):
        fork_map(fails, list(range(4)), 2)

    def fails_oddly(x: int) -> int:
        raise _Unpicklable(x, 7)

    with pytest.raises((RuntimeError, _Unpicklable), match="cut at 7"):
        fork_map(fails_oddly, list(range(4)), 2)


def test_fewer_items_than_workers_and_one_worker():
    assert fork_map(lambda x: x + 1, [1], 4) == [2]
    assert fork_map(lambda x: x + 1, [], 2) == []
