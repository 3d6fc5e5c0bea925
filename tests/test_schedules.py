"""Learning-rate schedules of the Adam recipe: warm-up, then rsqrt, constant or linear-to-zero."""

import math

import pytest

from attnmt.config import Config, apply_overrides, validate
from attnmt.errors import UserError
from attnmt.train.training import learning_rate


def _cfg(schedule: str) -> Config:
    return apply_overrides(Config(), ["train.optimizer=adam", "train.lr=0.002", "train.warmup=100",
                                      f"train.schedule={schedule}"])


@pytest.mark.parametrize("schedule", ["rsqrt", "constant", "linear"])
def test_warmup_is_linear_for_every_schedule(schedule):
    cfg = _cfg(schedule)
    assert learning_rate(cfg.train, 1, 50, progress=0.0) == pytest.approx(0.001)
    assert learning_rate(cfg.train, 1, 100, progress=0.0) == pytest.approx(0.002)


def test_after_warmup():
    assert learning_rate(_cfg("rsqrt").train, 1, 400) == pytest.approx(0.002 * math.sqrt(100 / 400))
    assert learning_rate(_cfg("constant").train, 1, 400, progress=0.9) == pytest.approx(0.002)
    linear = _cfg("linear")
    assert learning_rate(linear.train, 1, 400, progress=0.5) == pytest.approx(0.001)
    assert learning_rate(linear.train, 1, 400, progress=1.0) == 0.0
    assert learning_rate(linear.train, 1, 400, progress=0.25) > learning_rate(linear.train, 1, 400, progress=0.75)


def test_unknown_schedule_is_a_user_error():
    with pytest.raises(UserError, match="train.schedule"):
        validate(_cfg("cosine"))


def test_the_progress_bar_counts_what_ends_the_run(tiny_corpus):
    """A time budget fills the bar by time (a step count it will not reach does not); without one,
    by steps."""
    from attnmt.config import load_config
    from attnmt.train.progress import spent

    timed = load_config(tiny_corpus.config, ["train.max_time=100", "train.max_steps=100000", "train.epochs=1000"])
    assert spent(timed.train, step=450, elapsed=45.0, steps_per_epoch=16) == 0.45
    stepped = load_config(tiny_corpus.config, ["train.max_steps=200", "train.epochs=1000"])
    assert spent(stepped.train, step=50, elapsed=999.0, steps_per_epoch=16) == 0.25
    epochs = load_config(tiny_corpus.config, ["train.epochs=4"])
    assert spent(epochs.train, step=32, elapsed=1.0, steps_per_epoch=16) == 0.5
