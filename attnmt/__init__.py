"""attnmt: attention-based neural text generation (Luong 2015, NgramRes 2022, differentiable windows 2020).

    import attnmt
    model = attnmt.load("runs/demo")      # a training run; see attnmt/api.py and README.md
"""

from __future__ import annotations

__version__ = "0.1.0"


def load(run_dir, checkpoint: str = "best", device: str = "auto", raw_weights: bool = False):
    """A trained run as an ``attnmt.api.Model`` (translate / score / classify); the arguments are
    ``attnmt.api.load``'s (``raw_weights``: a train.ema run's raw weights, not its EMA ones)."""
    from attnmt.api import load as _load  # torch is imported on first use, not by `import attnmt`

    return _load(run_dir, checkpoint, device, raw_weights=raw_weights)
