"""Batches searched by several processes at once: ``attnmt translate --workers N`` on a CPU.

Threads that search batches side by side (``Translator``'s default) share one interpreter lock:
a search step's Python between the tensor ops waits for it, and on 2 cores the threads reach
~1.7× one thread's rate. Processes do not share it: ``fork_map`` forks ``workers - 1`` copies
of this one after the model is loaded (its weights shared, copy-on-write), and every process,
this one included, takes the next batch from a shared counter until none is left (longest
batches first, so the last ones are short and the processes finish together), on one thread
each. The children send their results back through a pipe, pickled by value (tensors too, not
torch's shared-memory handles, which die with the child): objects this process made a moment
ago, never a file.

Forking a process that holds an OpenMP thread pool is safe here because every process runs on
one thread from the fork on (``torch.set_num_threads(1)`` before it): a one-thread parallel
region never touches the pool. On Linux only (elsewhere the threads).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch


def fork_applies(workers: int, device: torch.device) -> bool:
    """Whether ``fork_map`` can run ``workers`` searches at once on ``device``: on Linux only
    (macOS offers fork, but its system libraries are not safe to use after one)."""
    return (workers > 1 and device.type == "cpu" and sys.platform.startswith("linux")
            and "fork" in mp.get_all_start_methods())


def _take(counter, total: int):
    """The indices this process takes from the shared counter, one at a time."""
    while True:
        with counter.get_lock():
            index = counter.value
            counter.value += 1
        if index >= total:
            return
        yield index


def _portable(error: BaseException) -> BaseException:
    """``error``, or a RuntimeError with its message where it does not survive pickling."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle or rebuild it
        return RuntimeError(f"{type(error).__name__}: {error}")


def _child(fn: Callable[[Any], Any], items: Sequence, counter, send) -> None:
    try:
        done = {i: fn(items[i]) for i in _take(counter, len(items))}
        message = pickle.dumps(("ok", done))
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the parent
        message = pickle.dumps(("error", _portable(error)))
    try:
        send.send_bytes(message)
    finally:
        send.close()


def fork_map(fn: Callable[[Any], Any], items: Sequence, workers: int,
             taken: Callable[[int], None] | None = None) -> list:
    """``[fn(item) for item in items]``, by this process and ``workers - 1`` forked ones, each on
    one thread, items taken in order as processes become free. ``fn``'s results must pickle. An
    exception is raised here after every child has stopped: this process's own, else the first
    failed child's in the order they were forked. ``taken(k)``: called in this process after
    each of its own items with the number of items all processes have begun (a progress bar's
    measure: the children report nothing until they end)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    counter = ctx.Value("i", 0)
    children = []
    try:
        for _ in range(min(workers, len(items)) - 1):
            receive, send = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_child, args=(fn, items, counter, send), daemon=True)
            child.start()
            send.close()
            children.append((child, receive))
        results = {}
        for i in _take(counter, len(items)):
            results[i] = fn(items[i])
            if taken is not None:
                taken(min(counter.value, len(items)))
        for child, receive in children:
            try:
                status, payload = pickle.loads(receive.recv_bytes())
            except EOFError:
                child.join()
                raise RuntimeError(f"a search process stopped without its results "
                                   f"(exit code {child.exitcode})") from None
            if status == "error":
                raise payload
            results.update(payload)
        return [results[i] for i in range(len(items))]
    finally:
        for child, receive in children:
            if child.is_alive():
                child.kill()
            child.join()
            receive.close()
        torch.set_num_threads(threads)
