"""Generation models. ``build_model`` maps a config to a model; every model implements the
interface documented in seq2seq.py (forward / encode / init_state / step)."""

from __future__ import annotations

from torch import nn

from attnmt.config import Config, validate
from attnmt.errors import UserError


def build_model(cfg: Config, src_vocab: int, tgt_vocab: int) -> nn.Module:
    validate(cfg)  # configs made in code get the checks load_config gives files
    kind = cfg.model.type
    if cfg.task == "translate" and kind == "lstm":
        from attnmt.models.seq2seq import Seq2Seq

        return Seq2Seq(cfg.model, src_vocab, tgt_vocab, cfg.train.init_uniform)
    if cfg.task == "lm" and kind == "lstm":
        from attnmt.models.lm import LSTMLM

        return LSTMLM(cfg.model, tgt_vocab, cfg.train.init_uniform)
    if kind == "transformer":
        from attnmt.models import transformer

        if cfg.task == "translate":
            return transformer.Transformer(cfg.model, src_vocab, tgt_vocab)
        if cfg.task == "lm":
            return transformer.TransformerLM(cfg.model, tgt_vocab)
        if cfg.task == "classify":  # tgt_vocab = number of classes
            from attnmt.models.classifier import TransformerClassifier

            return TransformerClassifier(cfg.model, src_vocab, tgt_vocab)
    raise UserError(f"no model of type {kind!r} for task {cfg.task!r}")
