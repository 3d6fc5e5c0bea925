"""One batch's forward and backward as groups of its rows at once, one CPU thread per group.

A batch's loss is a sum over its sentences, so its gradient is the sum of the gradients of any
split of its rows. On a 2-core CPU, two 1-thread passes over 32 sentences each use the cores better
than one 2-thread pass over 64: the LSTM steps' 64-row products split poorly across two threads,
and the element-wise ops between them use one thread either way. Measured in separate processes
(docs/results/race.md): about +4 % target pieces/s at hidden 512 (six pairs, −0.9 to +11 %), no gain
at 256, so the automatic setting (``train.row_groups: 0``) uses threads from hidden 512 on. On
Linux the trainer runs the groups as processes instead (train/row_processes.py), which
gain at 256 too (``train.row_workers``).

Rows are dealt to the groups in order of target length (longest to group 0, next to group 1, ...),
so the groups have about the same work, and each group is trimmed to its own longest sentence.
The gradients are summed into ``.grad`` in a fixed order: the result equals one pass over the
whole batch up to float rounding (dropout aside: each group draws its own masks).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from attnmt.data.batching import Batch
from attnmt.data.vocab import PAD

# fewer rows than this per group and the products get too small to gain
MIN_GROUP_ROWS = 16
_pool: ThreadPoolExecutor | None = None


# below these hidden sizes the automatic setting keeps one pass. Threads: neutral at 256, ~+4 % at
# 512; processes: +6 to +21 % at 256 (median pair +17 %), +0 to +3 % over threads at 512
# (docs/results/race.md)
AUTO_MIN_HIDDEN = {"threads": 512, "processes": 256}


def group_count(rows: int, threads: int) -> int:
    """How many groups a batch of ``rows`` sentences gets on ``threads`` CPU threads."""
    return max(1, min(threads, rows // MIN_GROUP_ROWS))


def groups_for(setting: int, rows: int, threads: int, hidden: int, workers: str = "threads") -> int:
    """``train.row_groups`` resolved for a batch: 1 = off; n > 1: up to n; 0 (auto): one per
    thread for models with hidden ≥ AUTO_MIN_HIDDEN[workers]."""
    if setting == 1 or (setting == 0 and hidden < AUTO_MIN_HIDDEN[workers]):
        return 1
    return group_count(rows, min(threads, setting) if setting else threads)


def split_rows(batch: Batch, groups: int) -> list[Batch]:
    """The batch's rows dealt to ``groups`` batches by target length, each trimmed of the
    padding columns none of its rows needs."""
    lengths = (batch.tgt_out != PAD).sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    parts = []
    for k in range(groups):
        rows = order[k::groups]
        src_len = int(batch.src_lengths[rows].max())
        tgt_len = int(lengths[rows].max())
        parts.append(Batch(batch.src[rows, :src_len], batch.src_lengths[rows], batch.tgt_in[rows, :tgt_len],
                           batch.tgt_out[rows, :tgt_len], batch.index[rows]))
    return parts


def grouped_backward(model: torch.nn.Module, batch: Batch, groups: int, scale: float, smoothing: float) -> float:
    """``(model.token_loss(batch) * scale).backward()`` as ``groups`` passes at once, one thread
    each; returns the (unscaled) loss. ``model``'s class must define token_loss (Seq2Seq)."""
    global _pool
    params = [p for p in model.parameters() if p.requires_grad]
    loss_of = model.token_loss

    def run(part: Batch) -> tuple[float, tuple]:
        with torch.enable_grad():
            loss = loss_of(part.src, part.src_lengths, part.tgt_in, part.tgt_out, smoothing)
            grads = torch.autograd.grad(loss * scale, params, allow_unused=True)
        return float(loss.detach()), grads

    if _pool is None or _pool._max_workers < groups:
        _pool = ThreadPoolExecutor(groups, thread_name_prefix="attnmt-rows")
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // groups))
    try:
        results = list(_pool.map(run, split_rows(batch, groups)))
    finally:
        torch.set_num_threads(threads)
    for i, p in enumerate(params):
        parts = [grads[i] for _, grads in results if grads[i] is not None]
        if not parts:
            continue
        # a fresh sum: autograd may hand two parameters the same tensor (b_ih and b_hh of an LSTM)
        total = parts[0] + parts[1] if len(parts) > 1 else parts[0].clone()
        for g in parts[2:]:
            total.add_(g)
        if p.grad is None:
            p.grad = total
        else:
            p.grad.add_(total)
    return sum(loss for loss, _ in results)
