"""The optimiser and its learning rate: the paper's SGD recipe, or Adam with warm-up."""

from __future__ import annotations

import math

import torch

from attnmt.config import TrainConfig
from attnmt.errors import UserError


def learning_rate(t: TrainConfig, epoch: int, step: int, progress: float = 0.0) -> float:
    """SGD (the paper): lr, halved (×decay) every epoch after ``decay_start``.
    Adam: linear warm-up for ``warmup`` steps, then (``schedule``) inverse square root decay,
    a constant rate, or a linear decay that reaches zero when ``progress`` (the spent fraction of
    the training budget) reaches 1."""
    if t.optimizer == "sgd":
        return t.lr * t.decay ** max(0, epoch - t.decay_start)
    step, warmup = max(step, 1), max(t.warmup, 1)
    ramp = min(step / warmup, 1.0)
    if t.schedule == "constant":
        return t.lr * ramp
    if t.schedule == "linear":
        return t.lr * ramp * max(1.0 - progress, 0.0)
    return t.lr * min(step / warmup, math.sqrt(warmup / step))


def make_optimizer(t: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    if t.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=t.lr)
    if t.optimizer == "adam":
        # the fused kernel: one pass over all parameters (on CPU ~9x faster than the default loop)
        fused = all(p.device.type in ("cpu", "cuda") for p in model.parameters())
        return torch.optim.Adam(model.parameters(), lr=t.lr, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    raise UserError(f"train.optimizer must be sgd or adam, not {t.optimizer!r}")
