"""Ensembles: beam search over the averaged predictions of several trained models.

Luong et al. (2015, Table 1) combine 8 models that differ in attention type, dropout etc. At each
step every model m gives p_m(y_t | y_<t, x); the ensemble scores with

    logprob mode:  log p(y_t) ∝ (1/M) Σ_m log p_m(y_t)      (geometric mean, renormalised)
    prob mode:     log p(y_t) = log (1/M) Σ_m p_m(y_t)      (arithmetic mean)

``Ensemble`` implements encode / init_state / step, so attnmt.decode.search runs it unchanged
(``step`` returns log-probabilities; the search's log_softmax renormalises the logprob mode).
Models may differ in architecture, attention, size and source tokenizer (each model reads the
source through its own tokenizer, lower-casing and reversal: see ``bind``), but must share the
target vocabulary, since the search adds up scores of target ids.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import torch

from attnmt.data.batching import Batch, collate
from attnmt.data.vocab import Tokenizer
from attnmt.decode.translate import Translation, Translator
from attnmt.errors import UserError
from attnmt.runs.loader import Run, Source, load_run

MODES = ("logprob", "prob")


def _pieces(tok: Tokenizer) -> list[str]:
    return [tok.piece(i) for i in range(len(tok))]


def load_members(runs: list[str], checkpoint: str = "best", device: str = "auto",
                 ngram: str | None = None, alpha: float | None = None,
                 raw_weights: bool = False) -> list[Run]:
    """Load every run; all must share the target vocabulary (same pieces, same ids)."""
    members = []
    for run in runs:
        member = load_run(run, checkpoint, device, ngram, alpha, raw_weights)
        if member.cfg.task != "translate":
            raise UserError("only translation models can be combined", run)
        members.append(member)
    first = members[0]
    reference = _pieces(first.tgt_tok)
    for m in members[1:]:
        if m.tgt_tok.kind != first.tgt_tok.kind or _pieces(m.tgt_tok) != reference:
            raise UserError(
                f"target vocabulary differs from {first.name}'s ({len(m.tgt_tok)} vs {len(reference)} "
                "entries); ensembles need one shared target vocabulary", m.name)
    return members


class Ensemble:
    """M models behind the single-model search interface; state and encoder output are lists."""

    has_attention = False  # the members' attention covers different source pieces

    def __init__(self, models: list[torch.nn.Module], mode: str = "logprob"):
        if mode not in MODES:
            raise UserError(f"--ensemble-mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not models:
            raise UserError("an ensemble needs at least one model")
        self.models, self.mode = models, mode
        self._bound: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def bind(self, sources: list[tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Per-model (src, src_lengths) for the next ``encode``; without it every model reads the
        ``src`` given to encode (fine when they share the source tokenizer and direction)."""
        self._bound = sources

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> list:
        sources = self._bound or [(src, src_lengths)] * len(self.models)
        return [m.encode(s, n) for m, (s, n) in zip(self.models, sources)]

    def init_state(self, enc: list) -> list:
        return [m.init_state(e) for m, e in zip(self.models, enc)]

    def step(self, prefix: torch.Tensor, state: list, enc: list, need_weights: bool = False):
        outs = [m.step(prefix, s, e, False) for m, s, e in zip(self.models, state, enc)]
        logp = torch.stack([torch.log_softmax(o[0].float(), dim=-1) for o in outs])  # (M, B, V)
        if self.mode == "logprob":
            combined = logp.mean(0)
        else:
            combined = torch.logsumexp(logp, dim=0) - math.log(len(self.models))
        return combined, [o[1] for o in outs], None


class MemberSources(NamedTuple):
    """A source line as every member reads it; the first three fields are member 0's reading,
    which orders the batches and sets the output length limit."""

    pieces: list[str]
    words: list[int]
    ids: list[int]
    each: list[Source]


class EnsembleTranslator(Translator):
    """Translator over an Ensemble: text in, ``Translation`` objects out (no attention matrices)."""

    def __init__(self, members: list[Run], mode: str = "logprob"):
        first = members[0] if members else None
        self.ensemble = Ensemble([m.model for m in members], mode)
        super().__init__(self.ensemble, first.cfg, first.src_tok, first.tgt_tok, first.device)
        self.members = members

    @property
    def runs(self) -> list[Run]:
        return self.members

    def _prepare(self, line: str) -> MemberSources:
        each = [m.source(line) for m in self.members]
        return MemberSources(*each[0], each)

    parallel_batches = False  # _batch binds the members' inputs to the one shared ensemble

    def _batch(self, prepared: list[MemberSources], index: list[int]) -> tuple[list[list[int]], Batch]:
        """Member 0's batch for the search; every member's own batch bound to the ensemble."""
        ids = [m.source_ids([p.each[k] for p in prepared]) for k, m in enumerate(self.members)]
        batches = [collate(x, None, index).to(self.device) for x in ids]
        self.ensemble.bind([(b.src, b.src_lengths) for b in batches])
        return ids[0], batches[0]

    def translate(self, lines: list[str], *args, **kwargs) -> list[list[Translation]]:
        try:
            return super().translate(lines, *args, **kwargs)
        finally:
            self.ensemble.bind(None)


def load_translator(
    runs: list[str], checkpoint: str = "best", device: str = "auto", mode: str = "logprob",
    ngram: str | None = None, alpha: float | None = None, raw_weights: bool = False,
) -> Translator:
    """A Translator for one run, an EnsembleTranslator for several (``ngram``/``alpha``: NgramRes
    plug and play for every model, see attnmt/ngram/residual.py)."""
    if mode not in MODES:
        raise UserError(f"--ensemble-mode must be one of {', '.join(MODES)}, not {mode!r}")
    for run in runs:
        if not Path(run).is_dir():
            raise UserError("run directory not found", run)
    if len(runs) == 1:
        return Translator.from_run(runs[0], checkpoint, device, ngram, alpha, raw_weights)
    return EnsembleTranslator(load_members(runs, checkpoint, device, ngram, alpha, raw_weights), mode)
