"""Generation models. ``build_model`` maps a config to a model; every model implements the
interface documented in seq2seq.py (forward / encode / init_state / step)."""

from __future__ import annotations

from torch import nn

from attnmt.config import Config, validate
from attnmt.errors import UserError


def build_model(cfg: Config, src_vocab: int, tgt_vocab: int) -> nn.Module:
    validate(cfg)  # configs made in code get the checks load_config gives files
    try:
        return _build(cfg, src_vocab, tgt_vocab)
    except (MemoryError, RuntimeError) as err:  # e.g. model.hidden=1000000000: a traceback before
        text = str(err)
        if not isinstance(err, MemoryError) and "allocate" not in text and "out of memory" not in text:
            raise
        m = cfg.model
        raise UserError(f"the model does not fit in memory (model.layers={m.layers}, model.hidden="
                        f"{m.hidden}, model.embed={getattr(m, 'embed', m.hidden)}, vocabularies {src_vocab} and {tgt_vocab}): "
                        f"{text.strip().splitlines()[-1][:160] if text.strip() else 'MemoryError'}") from None


def _build(cfg: Config, src_vocab: int, tgt_vocab: int) -> nn.Module:
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
