"""One optimiser update: forward with teacher forcing, the loss, backward (through DDP, autocast
and gradient scaling where they apply, or as row groups on a CPU), clipping, the step, the
weights' moving average.

The loss is normalised per sentence (the paper's SGD recipe) or per token (``train.loss_norm``);
several batches are one update with ``train.accumulate``. On a CPU with two or more threads an
LSTM batch from hidden 256 runs as groups of rows at once, one thread each, on threads
(train/row_groups.py) or forked processes sharing the weights (train/row_processes.py).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from attnmt.config import TrainConfig
from attnmt.data.batching import Batch
from attnmt.kernels.packed import bf16_products, native_bf16
from attnmt.models.common import loss_units, model_loss
from attnmt.train.allocator import TRIM_EVERY, keep_freed_memory, release_freed_memory
from attnmt.train.distributed import Dist
from attnmt.train.ema import EMA
from attnmt.train.row_groups import grouped_backward, groups_for
from attnmt.train.row_processes import RowProcesses, supported as row_processes_supported


class TokenLoss(torch.nn.Module):
    """A model's own ``token_loss`` as a module's forward: the step calls it through DDP when
    training is data-parallel, so the cheap loss and DDP's gradient synchronisation go together."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                tgt_out: torch.Tensor, smoothing: float) -> torch.Tensor:
        return self.model.token_loss(src, src_lengths, tgt_in, tgt_out, smoothing)


class Updater:
    """The update of ``model`` by ``optimizer`` (module docstring)."""

    def __init__(self, t: TrainConfig, hidden: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 ema: EMA | None, dist: Dist, device: torch.device):
        """``t``: the train section; ``hidden``: the model's width (row groups are for wide ones)."""
        self.train, self.hidden, self.model, self.optimizer, self.ema = t, hidden, model, optimizer, ema
        self.dist, self.device = dist, device
        # A model may define token_loss(src, src_lengths, tgt_in, tgt_out, smoothing), equal to
        # token_loss(model(...)) but cheaper (Seq2Seq: no logits for padding). The NgramRes head
        # defines none: its loss comes from its forward, the n-gram term included.
        self.fused_loss = getattr(model, "token_loss", None) is not None
        want = t.row_workers == "processes" and device.type == "cpu"
        self.row_workers = "processes" if want and row_processes_supported(model) else "threads"
        self.row_processes: RowProcesses | None = None  # see start_row_processes
        self.ddp = model
        if dist.world > 1:  # DDP synchronises the gradients of what its forward runs
            ids = [device.index] if device.type == "cuda" else None
            wrapped = TokenLoss(model) if self.fused_loss else model
            self.ddp = torch.nn.parallel.DistributedDataParallel(wrapped, device_ids=ids)
        use_amp = t.amp and device.type == "cuda"
        dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
        self.autocast = (lambda: torch.autocast("cuda", dtype=dtype)) if use_amp else nullcontext
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp and dtype == torch.float16)
        # CPU: the products in bfloat16 where the CPU has bfloat16 units (kernels/packed.py)
        self.cpu_bf16 = t.amp and device.type == "cpu" and native_bf16()
        if device.type == "cpu":  # an update's large tensors reuse the last one's pages
            keep_freed_memory()

    @property
    def precision(self) -> str:
        t = self.train
        return "bf16 products" if self.cpu_bf16 else ("amp" if t.amp and self.device.type == "cuda" else "float32")

    def update(self, batches: list[Batch], lr: float, step: int) -> tuple[float, int]:
        """Update ``step`` (counted from 1) from ``batches``; returns summed loss and tokens."""
        with bf16_products(self.cpu_bf16):  # row processes forked in here inherit it
            done = self._update(batches, lr, step)
        if step % TRIM_EVERY == 0 and self.device.type == "cpu":
            release_freed_memory()
        return done

    def _update(self, batches: list[Batch], lr: float, step: int) -> tuple[float, int]:
        t = self.train
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, total_tokens = 0.0, 0
        norm = sum(loss_units(self.model, b) if t.loss_norm == "tokens" else b.src.size(0) for b in batches)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            # row groups bypass DDP's forward, so they run in a single process only
            groups = self.row_groups(batch) if self.fused_loss and self.dist.world == 1 else 1
            if groups > 1:  # CPU: groups of rows at once, one thread each (train/row_groups.py)
                rows = self.start_row_processes()
                if rows is not None:  # ... each in its own process (train/row_processes.py)
                    total_loss += rows.backward(batch, 1.0 / norm, t.label_smoothing, groups)
                else:
                    total_loss += grouped_backward(self.model, batch, groups, 1.0 / norm, t.label_smoothing)
                total_tokens += loss_units(self.model, batch)
                continue
            sync = self.ddp.no_sync if (self.dist.world > 1 and i < len(batches) - 1) else nullcontext
            with sync(), self.autocast():
                if self.fused_loss:
                    args = (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, t.label_smoothing)
                    loss = self.ddp(*args) if self.dist.world > 1 else self.model.token_loss(*args)
                else:
                    logits, _ = self.ddp(batch.src, batch.src_lengths, batch.tgt_in)
                    loss = model_loss(self.model, logits, batch, t.label_smoothing)
            self.scaler.scale(loss / norm).backward()
            total_loss += float(loss.detach())
            total_tokens += loss_units(self.model, batch)
        self.scaler.unscale_(self.optimizer)
        if t.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.ema is not None:
            self.ema.update(step)
        return total_loss, total_tokens

    def row_groups(self, batch: Batch) -> int:
        """How many row groups a batch runs as (1: one pass): on CPU only (no autocast or
        gradient scaling there), as train.row_groups says (row_groups.groups_for)."""
        if self.device.type != "cpu":
            return 1
        return groups_for(self.train.row_groups, batch.src.size(0), torch.get_num_threads(), self.hidden,
                          self.row_workers)

    def start_row_processes(self) -> RowProcesses | None:
        """The worker processes of train.row_workers = processes, forked on first use (the
        trainer asks before it starts any thread: a fork copies only the calling one); None where
        row groups run on threads or not at all."""
        if self.row_processes is None and self.row_workers == "processes" and self.fused_loss \
                and self.dist.world == 1:
            # as many as the largest batch can use (train.batch_size bounds its rows, sentences
            # or tokens), not one per thread of a many-core machine
            t, threads = self.train, torch.get_num_threads()
            parts = groups_for(t.row_groups, t.batch_size * t.accumulate, threads, self.hidden, "processes")
            if parts > 1:
                self.row_processes = RowProcesses(self.model, parts - 1)
        return self.row_processes

    def close(self) -> None:
        if self.row_processes is not None:
            self.row_processes.close()
            self.row_processes = None
