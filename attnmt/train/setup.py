"""Everything a training run needs before its first update, built in order: the process group
and device, threads and seed, ``--init-from``'s source, the data, the model and its NgramRes
head, the optimizer (and the source's weights), the weights' moving average, TensorBoard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from attnmt.config import Config
from attnmt.models import build_model
from attnmt.train import init_from as init
from attnmt.train.data import TaskData, prepare_data
from attnmt.train.distributed import Dist, init_distributed
from attnmt.train.ema import EMA
from attnmt.train.optim import make_optimizer


@dataclass
class Parts:
    dist: Dist
    device: torch.device
    data: TaskData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    ema: EMA | None
    tensorboard: object | None
    resuming: bool  # RUN has a checkpoint to continue from
    init_note: dict | None  # the log record of --init-from


def set_up(cfg: Config, run_dir: Path, resume: bool, init_from: str | None, init_optimizer: bool,
           step: Callable[[], int]) -> Parts:
    """``init_from``: ``RUN[:CKPT]`` to start from (train/init_from.py), ignored when resuming
    from a checkpoint of this run; ``init_optimizer``: its optimizer state too; ``step``: the
    update count, which the NgramRes head's α annealing reads."""
    t = cfg.train
    dist, device = init_distributed(t.device)
    if t.threads > 0:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed + dist.rank)
    resuming = resume and (run_dir / "checkpoints" / "LAST").exists()
    source = None
    if init_from and not resuming:
        source, which = init.parse_spec(init_from)
        source_cfg = init.source_config(source)
        init.check_compatible(cfg, source_cfg, source)
    if dist.main:  # config.yaml is written by run_training once all of this worked
        run_dir.mkdir(parents=True, exist_ok=True)
        if source is not None:
            init.copy_vocabularies(source, run_dir)
    if source is not None:
        dist.barrier()  # the copied tokenizers are in place for every rank
    data = prepare_data(cfg, run_dir, dist.main, sync=dist.barrier)
    src_vocab = len(data.src_tok) if data.src_tok else 0
    model = build_model(cfg, src_vocab, len(data.tgt_tok)).to(device)
    # NgramRes (ngram: section): a head over the network whose state_dict is the network's; a
    # no-op without an n-gram model
    from attnmt.ngram.residual import attach_ngram

    model = attach_ngram(model, cfg, run_dir, data.tgt_tok, step_fn=step,
                         train_targets=data.train.targets_flat if dist.main else None, sync=dist.barrier)
    optimizer = make_optimizer(t, model)
    note = None
    if source is not None:
        loaded = init.load_initial(model, optimizer if init_optimizer else None, source, which,
                                   source_cfg.train.optimizer == t.optimizer)
        note = {"event": "init", "from": loaded, "optimizer": init_optimizer}
    ema = EMA(model, t.ema, t.ema_warmup) if t.ema > 0 else None  # θ̄₀: the initial weights
    tensorboard = None
    if t.tensorboard and dist.main:
        from attnmt.train.tensorboard import TensorBoard

        tensorboard = TensorBoard(run_dir)
    return Parts(dist, device, data, model, optimizer, ema, tensorboard, resuming, note)
