"""The one way to load a trained run: model, config and tokenizers for every caller.

    run = load_run("runs/gdf")                      # BEST checkpoint, device "auto", eval mode
    run.model, run.cfg, run.src_tok, run.tgt_tok    # tgt_tok: a LabelSet for classify runs
    run.source("a sentence")                        # (pieces, word of each piece, ids) as it reads
    run.source_ids([run.source(line)])              # id lists in the order the encoder reads them

translate, align and heat maps, ensembles, window analysis, the server, perplexity and accuracy
all load through ``load_run``. A checkpoint with EMA weights (train.ema: ema.safetensors) is
loaded with those unless ``raw_weights`` (translate/eval --raw-weights); ``Run.weights`` names
the file. ``ngram``/``alpha`` swap a run's n-gram model or fix its α
(NgramRes plug and play, attnmt/ngram/residual.py) at load time; the neural weights are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from attnmt.config import Config, load_config
from attnmt.data.labels import LabelSet
from attnmt.data.vocab import UNK, Tokenizer, load_tokenizer
from attnmt.errors import UserError
from attnmt.models import build_model
from attnmt.runs.checkpoint import find_checkpoint, load_weights, weights_path
from attnmt.runs.device import resolve_device


class Source(NamedTuple):
    """A source line as a model reads it, in input order (reversal is applied by ``source_ids``)."""

    pieces: list[str]
    words: list[int]  # whitespace-word index of each piece
    ids: list[int]


@dataclass
class Run:
    """A model with what is needed to feed it text (``name``: where it came from, for messages)."""

    model: nn.Module
    cfg: Config
    src_tok: Tokenizer | None
    tgt_tok: Tokenizer | LabelSet
    name: str = ""
    weights: str = ""  # the weights file loaded (ema.safetensors or model.safetensors)
    raw_unused: bool = False  # raw weights were asked for, but the checkpoint has no EMA ones

    def raw_weights_note(self) -> str | None:
        """A one-line warning when asking for the raw weights changed nothing (no silent no-ops)."""
        if not self.raw_unused:
            return None
        return (f"--raw-weights (raw_weights=True) has no effect: {self.name} has no EMA weights "
                "(it was trained without train.ema); its weights are model.safetensors")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def network(self) -> nn.Module:
        """The neural model: ``model`` itself, or the network under its NgramRes head (its
        decoder, fast paths and attention internals live here; ``model`` is what scores)."""
        from attnmt.ngram.residual import unwrap

        return unwrap(self.model)

    @property
    def ngram_head(self):
        """The NgramRes head (``model`` itself when the run has one, attnmt/ngram/residual.py), else None."""
        from attnmt.ngram.residual import NgramResidual

        return self.model if isinstance(self.model, NgramResidual) else None

    @property
    def ngram(self):
        """The n-gram LM of the run's NgramRes head, else None."""
        head = self.ngram_head
        return head.ngram if head is not None else None

    def source(self, line: str) -> Source:
        """Lower-cased by the tokenizer if the run was trained so; cut to its first ``model.max_src_len`` pieces
        when the location score (which covers that many positions) is used. This is the one
        truncation rule: translate, eval, score --model, align and the analyses all read sources
        through here (``truncation_warning`` counts the lines it cuts)."""
        pieces, words = self.src_tok.split_with_words(line)
        ids = self.src_tok.encode_pieces(pieces)[: self.cfg.model.source_limit()]
        return Source(pieces[: len(ids)], words[: len(ids)], ids)

    def target(self, text: str) -> tuple[list[str], list[int]]:
        """(pieces, ids) of target text as the model writes it (lower-cased if trained so): a
        forced prefix or a constraint of ``translate``. Unknown pieces get <unk>'s id."""
        if self.cfg.data.lowercase:
            text = text.lower()
        pieces = self.tgt_tok.split(text)
        return pieces, self.tgt_tok.encode_pieces(pieces)

    def sources_cut(self, lines: list[str]) -> int:
        """How many of ``lines`` ``source`` cuts (0 when the run reads whole sources)."""
        limit = self.cfg.model.source_limit()
        if limit is None or self.src_tok is None:
            return 0
        return sum(len(self.src_tok.split_with_words(x)[0]) > limit for x in lines)

    def source_ids(self, sources: list[Source]) -> list[list[int]]:
        """Encoder input: an empty source becomes one <unk>; reversed if the run reverses."""
        ids = [s.ids or [UNK] for s in sources]
        return [seq[::-1] for seq in ids] if self.cfg.data.reverse_source else ids


def truncation_warning(runs: list[Run], lines: list[str]) -> str | None:
    """The message commands print when a run cut some of ``lines`` (None when none was cut)."""
    notes = []
    for run in runs:
        cut = run.sources_cut(lines)
        if cut:
            limit = run.cfg.model.source_limit()
            name = f"{run.name}: " if run.name and len(runs) > 1 else ""
            notes.append(f"{name}{cut} of {len(lines)} sources are longer than model.max_src_len = {limit} "
                         f"pieces (the location score's reach) and were cut to their first {limit}")
    return "; ".join(notes) or None


def read_run(run_dir: str | Path) -> tuple[Config, Tokenizer | None, Tokenizer | LabelSet]:
    """A run directory's config, source tokenizer (None for LMs) and target tokenizer (the label
    set of a classifier)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        why = "is a file, not a run directory" if run_dir.exists() else "no such run directory"
        raise UserError(why, str(run_dir))
    config = run_dir / "config.yaml"
    if not config.exists() and not config.is_symlink():
        raise UserError("not a training run directory (no config.yaml: file not found)", str(run_dir))
    cfg = load_config(config)  # a directory, FIFO or device there: a one-line error (attnmt.files)
    lower = cfg.data.lowercase  # the tokenizers lower-case what they read
    src_tok = load_tokenizer(run_dir, "src", lower) if cfg.task in ("translate", "classify") else None
    tgt = LabelSet.load(run_dir) if cfg.task == "classify" else load_tokenizer(run_dir, "tgt", lower)
    return cfg, src_tok, tgt


def model_for(cfg: Config, src_tok: Tokenizer | None, tgt: Tokenizer | LabelSet) -> nn.Module:
    """An untrained model of the run's shape."""
    return build_model(cfg, len(src_tok) if src_tok else 0, len(tgt))


def load_weights_into(model: nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    """``model.load_state_dict(weights)``, with damage a plain load would accept refused: a
    non-floating tensor where the model has a floating one (its values would be cast, say int64
    weights truncated to whole numbers) or NaN/infinite values (a diverged or damaged checkpoint
    translates to empty lines and scores ppl=nan, exit 0). Every state a model starts in is finite."""
    expected = model.state_dict()
    for name, tensor in weights.items():
        want = expected.get(name)
        if want is None or not want.is_floating_point():
            continue  # an unknown name fails in load_state_dict below
        if not tensor.is_floating_point():
            raise UserError(f"weights do not fit the config ({name} is {tensor.dtype}, the model's "
                            f"{want.dtype})", where)
        if not bool(torch.isfinite(tensor).all()):
            raise UserError(f"weights hold NaN or infinite values ({name}): a diverged or damaged "
                            "checkpoint", where)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else (lines[0] if lines else type(err).__name__)
        raise UserError(f"weights do not fit the config ({detail[:240]})", where) from None


def check_vocabulary_sizes(model: nn.Module, weights: dict[str, torch.Tensor], run_dir: str | Path,
                           src_tok: Tokenizer | None, tgt: Tokenizer | LabelSet) -> None:
    """A vocabulary file whose size disagrees with the weights (one of another run, or edited)
    named as the culprit: a tensor of another shape whose differing dimensions all have that
    vocabulary's size in the model. (load_weights_into would only say the shapes differ.)"""
    expected = model.state_dict()
    run_dir = Path(run_dir)
    sides = [(n, tok) for n, tok in (("src", src_tok), ("tgt", tgt)) if tok is not None]
    for name, tensor in weights.items():
        want = expected.get(name)
        if want is None or want.dim() != tensor.dim() or want.shape == tensor.shape:
            continue
        differ = [i for i in range(want.dim()) if want.shape[i] != tensor.shape[i]]
        for side, tok in sides:
            if all(want.shape[i] == len(tok) for i in differ):
                files = ["labels.txt"] if isinstance(tok, LabelSet) else [f"{side}.spm.model", f"{side}.vocab"]
                file = next((run_dir / f for f in files if (run_dir / f).exists()), run_dir / files[-1])
                raise UserError(f"has {len(tok)} entries, but the weights' {name} has "
                                f"{tensor.shape[differ[0]]} (a vocabulary of another run, or edited?)", str(file))


def load_run(
    run_dir: str | Path,
    checkpoint: str = "best",
    device: str | torch.device = "auto",
    ngram: str | None = None,
    alpha: float | None = None,
    raw_weights: bool = False,
) -> Run:
    """Load checkpoint ``checkpoint`` (best, last or step-NNNNNNNN) of a run, in eval mode: its
    EMA weights when it has them (train.ema), its raw weights when not or with ``raw_weights``.

    A run trained with an n-gram model (``ngram:`` section) comes wrapped in its NgramResidual,
    with α at the checkpoint's step; ``ngram`` (a file) and ``alpha`` override them."""
    from attnmt.ngram.residual import attach_ngram, checkpoint_step, override

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    cfg, src_tok, tgt = read_run(run_dir)
    model = model_for(cfg, src_tok, tgt)
    ckpt = find_checkpoint(run_dir, checkpoint)
    path = weights_path(ckpt, raw_weights)
    raw_unused = raw_weights and path == weights_path(ckpt, False)
    weights = load_weights(path)
    check_vocabulary_sizes(model, weights, run_dir, src_tok, tgt)
    if cfg.task != "classify":
        model = attach_ngram(model, cfg, run_dir, tgt, step=checkpoint_step(ckpt))  # the run's n-gram
        model = override(model, cfg, tgt, ngram, alpha)
    load_weights_into(model, weights, str(run_dir))
    model.to(dev).eval()
    return Run(model, cfg, src_tok, tgt, str(run_dir), path.name, raw_unused)
