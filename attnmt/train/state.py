"""Where a run stands: its counters, what a checkpoint's ``trainer.pt`` holds, and ``--resume``.

A checkpoint holds the weights (``model.safetensors``; with train.ema ``ema.safetensors``) and
``trainer.pt``: the optimizer, these counters, the validation tracker and the RNG states, so a
resumed run continues with the same batches (data/batching.py: a function of seed and epoch)
and the same random numbers as if it had not stopped. The step of the last validation is kept
too, with its result: a run that patience (or its budget) ended is not validated again when it
is resumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnmt.config import TrainConfig
from attnmt.errors import UserError
from attnmt.runs.checkpoint import EMA_FILE, check_trainer_state, find_checkpoint, load_trainer_state, load_weights
from attnmt.runs.loader import load_weights_into
from attnmt.train.ema import EMA
from attnmt.train.validation import Tracker


@dataclass
class RunState:
    step: int = 0
    epoch: int = 1
    batch_in_epoch: int = 0
    elapsed: float = 0.0  # seconds of updates
    tokens: int = 0  # target tokens (or sentences, classify) trained on so far
    best_ppl: float = float("inf")  # the dev ppl of BEST
    best_step: int = 0  # the step of BEST
    tracker: Tracker = field(default_factory=lambda: Tracker.fresh("ppl"))  # BEST's metric, patience
    validated: tuple[int, dict] | None = None  # (step, result) of the latest validation

    @classmethod
    def fresh(cls, metric: str) -> "RunState":
        return cls(tracker=Tracker.fresh(metric))

    def to_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        return {
            "optimizer": optimizer.state_dict(),
            "step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "elapsed": self.elapsed, "best_ppl": self.best_ppl, "best_step": self.best_step,
            "valid_metric": self.tracker.metric, "best_score": self.tracker.best,
            "since_best": self.tracker.since_best, "tokens": self.tokens,
            "validated_step": self.validated[0] if self.validated else -1,
            "validated": _numbers(self.validated[1]) if self.validated else {},
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }


def _numbers(result: dict) -> dict:
    """A validation result as trainer.pt may hold it (weights_only: numbers and strings)."""
    return {k: v for k, v in result.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}


def resume(run_dir: Path, t: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
           ema: EMA | None) -> tuple[RunState, EMA | None, str]:
    """The state of RUN's last checkpoint, loaded into ``model``, ``optimizer`` (and ``ema``;
    a new one if train.ema was switched on at --resume) and torch's RNGs; returns it, the EMA
    and the checkpoint's name. What does not fit this run is a one-line error."""
    ckpt = find_checkpoint(run_dir, "last")
    weights = ckpt / "model.safetensors"  # a --set that changes the model's shape fails here
    load_weights_into(model, load_weights(weights), str(weights))
    saved = check_trainer_state(load_trainer_state(ckpt), ckpt / "trainer.pt")
    try:
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise UserError(f"trainer state does not fit this run ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''})", str(ckpt / "trainer.pt")) from None
    state = RunState(saved["step"], saved["epoch"], saved["batch_in_epoch"], saved["elapsed"],
                     saved.get("tokens", 0), saved["best_ppl"], saved.get("best_step", 0),
                     Tracker.fresh(t.valid_metric))
    if saved.get("valid_metric", "ppl") == t.valid_metric:
        best = saved.get("best_score", state.best_ppl)  # a checkpoint from before valid_metric: ppl
        state.tracker = Tracker(t.valid_metric, best, saved.get("since_best", 0))
    # else: --set train.valid_metric changed the metric; BEST is chosen afresh from here on
    if saved.get("validated_step", -1) == state.step and saved.get("validated"):
        state.validated = (state.step, dict(saved["validated"]))
    if ema is not None:
        path = ckpt / EMA_FILE
        if path.is_file():
            ema.load(load_weights(path), str(path))
        else:  # train.ema switched on at --resume: the average starts from the weights now
            ema = EMA(model, t.ema, t.ema_warmup)
    if torch.cuda.is_available() and saved.get("cuda_rng") is not None:
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return state, ema, ckpt.name
