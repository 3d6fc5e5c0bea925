"""A validation's numbers of the dev set: ppl by teacher forcing, train.valid_metric's BLEU or
chrF (train/validation.py), and TensorBoard's attention pictures."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from attnmt.config import Config
from attnmt.train import validation
from attnmt.train.tensorboard import example_translations


def evaluate_dev(model: torch.nn.Module, cfg: Config, data, device: torch.device, autocast=nullcontext,
                 tensorboard=None, step: int = 0) -> dict:
    """ppl by teacher forcing (a model's own ``evaluate``: the classifier), the dev BLEU/chrF of
    train.valid_metric, and TensorBoard's attention pictures, of the weights in the model.
    ``data``: the trainer's (train/data.TaskData)."""
    evaluate = getattr(type(model), "evaluate", None) or validation.perplexity
    result = evaluate(model, data.dev_src, data.dev_tgt, device, autocast=autocast)
    if cfg.train.valid_metric != "ppl":
        # searched in float32, as translate does: the score is the one users will see
        result.update(validation.dev_score(model, cfg, data.src_tok, data.tgt_tok, device,
                                           data.dev_src_text, data.dev_tgt_text))
    if tensorboard is not None and data.dev_src_text:
        tensorboard.attention(step, example_translations(model, cfg, data.src_tok, data.tgt_tok, device,
                                                         data.dev_src_text))
    return result
