"""attnmt: attention-based neural text generation (Luong 2015, NgramRes 2022, differentiable windows 2020)."""

__version__ = "0.1.0"
