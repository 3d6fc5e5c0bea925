"""An exponential moving average of the weights (``train.ema``), the Polyak-style average that
fairseq and Marian keep beside the raw weights.

After every update, for each floating-point parameter θ:

    θ̄ ← d_n · θ̄ + (1 − d_n) · θ      (θ̄ starts as the initial θ; n = updates so far)
    d_n = min(d, (1 + n) / (10 + n))   with train.ema_warmup (the default; d = train.ema)
    d_n = d                            without

The warm-up (TensorFlow's ExponentialMovingAverage with num_updates) keeps a short run's average
from leaning on the random initial weights: with d = 0.999 and no warm-up, θ₀ still weighs
0.999¹⁵⁰⁰ ≈ 22 % after 1,500 updates; with it, d_n reaches d only after ~9,000 updates.

The trainer validates (and so picks BEST) with θ̄ swapped into the model (``applied``), saves it
as ``ema.safetensors`` beside ``model.safetensors`` in every checkpoint (``weights``: the model's
state dict with θ̄ for the parameters, its own buffers otherwise) and loads it back on --resume.
Under DDP every rank holds the same θ̄: the parameters are equal on all ranks after each update;
rank 0 writes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attnmt.errors import UserError


class EMA:
    """θ̄ of a model's parameters; tied parameters (one tensor under two names) are averaged once."""

    def __init__(self, model: nn.Module, decay: float, warmup: bool = False):
        if not 0.0 < decay < 1.0:
            raise UserError(f"train.ema must lie in (0, 1) to average, got {decay}")
        self.decay = decay
        self.warmup = warmup
        self.model = model
        state = model.state_dict(keep_vars=True)  # Parameters themselves, under their saved names
        self.names: dict[str, int] = {}  # state-dict name -> index into params/shadow
        self.params: list[nn.Parameter] = []
        seen: dict[int, int] = {}
        for name, tensor in state.items():
            if not isinstance(tensor, nn.Parameter) or not tensor.is_floating_point():
                continue
            if id(tensor) not in seen:
                seen[id(tensor)] = len(self.params)
                self.params.append(tensor)
            self.names[name] = seen[id(tensor)]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self, step: int = 0) -> None:
        """One step of the average after the optimizer's update number ``step`` (1, 2, ...):
        θ̄ ← θ̄ + (1 − d_n)(θ − θ̄)."""
        decay = self.decay_at(step)
        for avg, p in zip(self.shadow, self.params):
            avg.lerp_(p.detach(), 1.0 - decay)

    def decay_at(self, step: int) -> float:
        """d_n: the configured decay, or min(d, (1 + n) / (10 + n)) under the warm-up."""
        return min(self.decay, (1 + step) / (10 + step)) if self.warmup else self.decay

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state dict with θ̄ in place of its parameters: contiguous CPU copies,
        ready for safetensors (which refuses shared tensors, so tied names get a copy each)."""
        out = {}
        for name, tensor in self.model.state_dict().items():
            src = self.shadow[self.names[name]] if name in self.names else tensor
            out[name] = src.detach().to("cpu").contiguous().clone()
        return out

    @torch.no_grad()
    def load(self, weights: dict[str, torch.Tensor], where: str) -> None:
        """θ̄ from a saved ``weights()`` (--resume): every averaged name present, shapes equal."""
        for name, k in self.names.items():
            if name not in weights:
                raise UserError(f"EMA weights lack {name} (saved without train.ema, or for another model)",
                                where)
            if weights[name].shape != self.shadow[k].shape:
                raise UserError(f"EMA weights do not fit the model ({name} is {tuple(weights[name].shape)}, "
                                f"the model's {tuple(self.shadow[k].shape)})", where)
            if not bool(torch.isfinite(weights[name]).all()):
                raise UserError(f"EMA weights hold NaN or infinite values ({name})", where)
            self.shadow[k].copy_(weights[name].to(self.shadow[k]))

    @contextmanager
    def applied(self) -> Iterator[None]:
        """θ̄ in the model for the duration (validation), the raw θ back afterwards."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, avg in zip(self.params, self.shadow):
                p.copy_(avg)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, raw):
                    p.copy_(r)
