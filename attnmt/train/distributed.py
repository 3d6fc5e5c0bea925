"""One process or torchrun's data-parallel group: rank, world, the device, barriers.

    torchrun --nproc-per-node N -m attnmt train CONFIG.yaml --out RUN

Only rank 0 writes files; every rank reads the same prepared corpus (its memory-mapped pages are
shared) and takes every N-th batch (data/batching.Batches.take).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from attnmt.runs.device import resolve_device


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def agree(self, flag: bool, device: torch.device) -> bool:
        """All ranks stop together: any rank's ``flag`` is everyone's."""
        if self.world == 1:
            return flag
        x = torch.tensor([1.0 if flag else 0.0], device=device)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return bool(x.item() > 0)


def init_distributed(device_name: str) -> tuple[Dist, torch.device]:
    """Join the process group torchrun set up (WORLD_SIZE > 1), or run as a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), resolve_device(device_name)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device_name != "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return Dist(rank, world, local_rank), device
