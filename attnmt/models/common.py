"""Small helpers shared by the models, the trainer and the search."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from attnmt.data.vocab import PAD


def select_batch(obj: Any, index: torch.Tensor) -> Any:
    """Pick batch rows ``index`` from every tensor in a nested state (batch on dimension 0).

    Works on tensors, dicts, lists, tuples, None and objects with a ``select(index)`` method, so
    beam search can reorder any model's decoder state without knowing its structure.
    """
    if obj is None:
        return None
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index)
    if hasattr(obj, "select") and not isinstance(obj, (dict, list, tuple)):
        return obj.select(index)
    if isinstance(obj, dict):
        return {k: select_batch(v, index) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(select_batch(v, index) for v in obj)
    return obj


def repeat_rows(obj: Any, k: int) -> Any:
    """Every batch row of a nested state repeated k times in place (row b -> rows b·k .. b·k+k-1),
    as ``select_batch(obj, arange(B).repeat_interleave(k))`` does. Objects with a
    ``repeat_rows(k)`` method (a Memory its attention can share between beam rows) decide
    themselves how to repeat; beam search repeats the encoder output this way."""
    if obj is None:
        return None
    if isinstance(obj, torch.Tensor):
        return obj.repeat_interleave(k, dim=0)
    if hasattr(obj, "repeat_rows") and not isinstance(obj, (dict, list, tuple)):
        return obj.repeat_rows(k)
    if isinstance(obj, dict):
        return {key: repeat_rows(v, k) for key, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(repeat_rows(v, k) for v in obj)
    return obj


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, S) bool mask, True on real positions."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def init_uniform_(module: torch.nn.Module, scale: float) -> None:
    """The paper's initialisation: every parameter uniform in [-scale, scale]."""
    for p in module.parameters():
        torch.nn.init.uniform_(p, -scale, scale)


# -- the training objective ---------------------------------------------------------------------
# Generation models are trained on the cross-entropy of their target tokens. A model class that
# is trained otherwise defines ``loss(logits, batch, smoothing)`` (the summed loss of its forward
# output) and ``units(batch)`` (how many things that sum is over); the classifier does.
def token_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy over non-padding target tokens. logits (B,T,V), target (B,T)."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        target.reshape(-1),
        ignore_index=PAD,
        reduction="sum",
        label_smoothing=smoothing,
    )


def rows_loss(output: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, target: torch.Tensor,
              smoothing: float = 0.0, rows: int = 1024) -> torch.Tensor:
    """``F.cross_entropy(output(h), target, reduction="sum")`` over the rows of h (N, d), target
    (N,): with autograd, in one piece; without (validation, scoring), ``rows`` rows at a time, so
    the (N, V) logits of a large batch are never held at once."""
    if torch.is_grad_enabled() or h.size(0) <= rows:
        return _cross_entropy(output(h), target, smoothing)
    return sum(_cross_entropy(output(h[i : i + rows]), target[i : i + rows], smoothing)
               for i in range(0, h.size(0), rows))


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    if logits.dtype in (torch.float16, torch.bfloat16):  # AMP: the loss in float32
        logits = logits.float()
    return F.cross_entropy(logits, target, reduction="sum", label_smoothing=smoothing)


def model_loss(model: torch.nn.Module, logits: torch.Tensor, batch, smoothing: float = 0.0) -> torch.Tensor:
    """The summed training loss of ``logits = model(batch...)[0]`` on ``batch``."""
    own = getattr(model, "loss", None)
    return own(logits, batch, smoothing) if own is not None else token_loss(logits, batch.tgt_out, smoothing)


def loss_units(model: torch.nn.Module, batch) -> int:
    """What ``model_loss`` sums over in ``batch``: target tokens (with </s>), or the model's units."""
    own = getattr(model, "units", None)
    return own(batch) if own is not None else batch.target_tokens
