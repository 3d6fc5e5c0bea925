"""One batch's forward and backward split between this process and forked worker processes.

The same split as train/row_groups.py (rows dealt by target length, each part trimmed to its
own longest sentence, gradients summed), but each part runs in its own process (on its share of
the threads: one each on 2 cores) instead of a thread of this one. Threads share one interpreter, and an LSTM's step loops
are many small tensor ops, each holding the GIL for a while; processes don't wait for each
other. Measured on 2 cores (docs/results/race.md): two processes of 32 rows on one thread each
train faster than 64 rows on two threads, where two threads of one process do not.

How the processes share the model: before forking, every parameter is moved into one block of
anonymous shared memory (``mmap``; not /dev/shm, whose size containers limit), so the
optimizer's in-place update in this process is what a worker reads at its next batch. Each
worker writes its part's gradient into its own shared block; this process adds those blocks to
its own ``.grad`` in a fixed order. Messages over a pipe carry only the part's token ids, the
loss scale, a dropout seed drawn from this process's generator (so a run stays reproducible
and resumable from its checkpointed RNG state) and whether the parent's update runs with
bfloat16 products (kernels/packed.py).

Only for the plain CPU case: a model whose class defines ``token_loss`` (Seq2Seq), one process
(no DDP), parameters and gradients in float32 on the CPU, and Linux (fork).
"""

from __future__ import annotations

import gc
import itertools
import mmap
import multiprocessing
import os
import signal
import sys

import torch

from attnmt.data.batching import Batch
from attnmt.kernels.packed import bf16_enabled, bf16_products
from attnmt.train.allocator import TRIM_EVERY, release_freed_memory
from attnmt.train.row_groups import split_rows


def _shared_block(numel: int) -> tuple[mmap.mmap, torch.Tensor]:
    """A float32 tensor of ``numel`` zeros in anonymous shared memory: after a fork, both
    processes see each other's writes."""
    block = mmap.mmap(-1, max(numel, 1) * 4, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    return block, torch.frombuffer(block, dtype=torch.float32, count=numel)


def _views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    out, at = [], 0
    for p in like:
        out.append(flat[at : at + p.numel()].view_as(p))
        at += p.numel()
    return out


def supported(model: torch.nn.Module) -> bool:
    """Whether ``model`` can be trained with row processes here: a fused token loss, float32
    parameters on the CPU, and Linux's ``fork``."""
    params = [p for p in model.parameters() if p.requires_grad]
    return (
        getattr(model, "token_loss", None) is not None
        and sys.platform.startswith("linux")  # fork is unsafe under macOS's system frameworks
        and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in params)
    )


class RowProcesses:
    """``workers`` forked processes that each take one part of every batch, each on its share of
    this process's threads (``torch.get_num_threads() // (workers + 1)``).

    Call :meth:`backward` instead of ``(model.token_loss(batch) * scale).backward()``, and
    :meth:`close` when training ends (or use it as a context manager). Create it after the model's
    weights are final for the start (built, resumed) and before any other thread is started:
    ``fork`` copies only the calling thread."""

    def __init__(self, model: torch.nn.Module, workers: int):
        if not supported(model):
            raise ValueError("row processes need a CPU float32 model with token_loss, on Linux")
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in self.params)
        self._blocks = []
        block, flat = _shared_block(numel)
        self._blocks.append(block)
        for p, view in zip(self.params, _views(flat, self.params)):
            view.copy_(p.detach())
            p.data = view  # same Parameter object: optimizer, modules and LSTM flat weights keep it
        self.grads = []
        for _ in range(workers):
            block, flat = _shared_block(numel)
            self._blocks.append(block)
            self.grads.append(_views(flat, self.params))
        self.conns, self.procs = [], []
        ctx = multiprocessing.get_context("fork")
        threads_each = max(1, torch.get_num_threads() // (workers + 1))  # as this process's share
        gc.collect()
        gc.freeze()  # the children's garbage collector won't copy every page it touches
        try:
            for k in range(workers):
                ours, theirs = ctx.Pipe()
                # the child closes the parent ends it inherits (its own too): when the parent dies,
                # its pipe reads end of file and it exits instead of waiting forever
                proc = ctx.Process(target=_serve, args=(model, self.params, self.grads[k], theirs,
                                                        [*self.conns, ours], threads_each),
                                   name=f"attnmt-rows-{k + 1}", daemon=True)
                proc.start()
                theirs.close()
                self.conns.append(ours)
                self.procs.append(proc)
        finally:
            gc.unfreeze()

    @property
    def parts(self) -> int:
        return len(self.conns) + 1

    def backward(self, batch: Batch, scale: float, smoothing: float, parts: int | None = None) -> float:
        """Accumulate ``scale`` × the gradient of ``batch``'s summed token loss into the
        parameters' ``.grad``, the batch split into ``parts`` (at most, and by default, one per
        process); returns the unscaled loss."""
        parts = split_rows(batch, min(parts or self.parts, self.parts))
        busy = len(parts) - 1
        seeds = torch.randint(0, 2**62, (busy,)).tolist()
        for k, (part, seed) in enumerate(zip(parts[1:], seeds)):
            try:
                self.conns[k].send((part.src.numpy(), part.src_lengths.numpy(), part.tgt_in.numpy(),
                                    part.tgt_out.numpy(), scale, smoothing, seed, bf16_enabled()))
            except OSError:  # a dead worker; those already sent a part answer first
                self._collect(k)
                raise self._stopped(k) from None
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads // len(parts)))
        try:
            own = parts[0]
            loss = self.model.token_loss(own.src, own.src_lengths, own.tgt_in, own.tgt_out, smoothing)
            (loss * scale).backward()
            total = float(loss.detach())
        finally:
            torch.set_num_threads(threads)
            replies = self._collect(busy)
        for k, reply in enumerate(replies):
            total += reply
            for p, g in zip(self.params, self.grads[k]):
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.add_(g)
        return total

    def _collect(self, busy: int) -> list[float]:
        """The losses of the first ``busy`` workers. Every answer is read before a failure is
        raised, so the next batch's answers are not mistaken for this one's."""
        replies: list[float | str | RuntimeError] = []
        for k in range(busy):
            try:
                replies.append(self.conns[k].recv())
            except (EOFError, OSError):
                replies.append(self._stopped(k))
        for k, reply in enumerate(replies):
            if isinstance(reply, RuntimeError):
                raise reply
            if isinstance(reply, str):
                raise RuntimeError(f"row process {k + 1} failed: {reply}")
        return replies

    def _stopped(self, k: int) -> RuntimeError:
        self.procs[k].join(1)
        return RuntimeError(f"row process {k + 1} stopped (exit code {self.procs[k].exitcode})")

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
                conn.close()
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        self.conns, self.procs = [], []

    def __enter__(self) -> "RowProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(model: torch.nn.Module, params: list[torch.Tensor], grads: list[torch.Tensor], conn,
           parent_ends: list, threads: int) -> None:
    """A worker: for every message, its part's loss and gradient (into ``grads``), then the loss."""
    for end in parent_ends:
        end.close()
    # Ctrl-C and SIGTERM go to the whole process group; the parent decides when training stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(threads)
    loss_of = model.token_loss
    for count in itertools.count(1):
        if count % TRIM_EVERY == 0:  # as the parent does (train/allocator.py)
            release_freed_memory()
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        src, src_lengths, tgt_in, tgt_out, scale, smoothing, seed, bf16 = message
        try:
            torch.manual_seed(seed)
            with bf16_products(bf16):  # as the parent's update does
                loss = loss_of(torch.from_numpy(src), torch.from_numpy(src_lengths),
                               torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), smoothing)
                got = torch.autograd.grad(loss * scale, params, allow_unused=True)
            for buf, g in zip(grads, got):
                if g is None:
                    buf.zero_()
                else:
                    buf.copy_(g)
            reply: float | str = float(loss.detach())
        except Exception as err:  # reported by the parent, which stops training
            reply = f"{type(err).__name__}: {err}"
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            break
    os._exit(0)  # skip the interpreter's exit handlers, which belong to the parent
