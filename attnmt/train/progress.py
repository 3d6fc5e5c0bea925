"""The training progress bar: its total is whatever will end the run.

The bar shows the spent share of the budget: the largest of updates / train.max_steps, seconds of
updates / train.max_time and updates / (train.epochs · updates per epoch), for the budgets that
are set, so a run that its time budget will end fills the bar by time, not by a step count it
will never reach; tqdm's remaining time is then the budget's. Off on ranks other than 0; on a
terminal it redraws each second, in a log file every 30 seconds.
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

from attnmt.config import TrainConfig

SCALE = 1000  # the bar counts thousandths of the budget


def spent(t: TrainConfig, step: int, elapsed: float, steps_per_epoch: int) -> float:
    """The spent fraction of the training budget (module docstring), at most 1."""
    parts = [step / max(steps_per_epoch * t.epochs, 1)]
    if t.max_steps:
        parts.append(step / t.max_steps)
    if t.max_time:
        parts.append(elapsed / t.max_time)
    return min(max(parts), 1.0)


class Bar:
    def __init__(self, initial: float, enabled: bool):
        self.bar = tqdm(total=SCALE, initial=int(initial * SCALE), disable=not enabled, dynamic_ncols=True,
                        file=sys.stderr, bar_format="{percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
                        mininterval=1.0 if os.isatty(2) else 30.0)

    def advance(self, fraction: float) -> None:
        target = int(fraction * SCALE)
        if target > self.bar.n:
            self.bar.update(target - self.bar.n)

    def show(self, **values: str) -> None:
        self.bar.set_postfix(values, refresh=False)

    def close(self) -> None:
        self.bar.close()
