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

import torch

from attnmt.data.batching import collate
from attnmt.data.vocab import UNK, Tokenizer
from attnmt.decode.force import Member, prepare_source
from attnmt.decode.search import beam_search, greedy_search
from attnmt.decode.translate import Translation, Translator, load_model
from attnmt.errors import UserError
from attnmt.runs.device import resolve_device

MODES = ("logprob", "prob")


def _pieces(tok: Tokenizer) -> list[str]:
    return [tok.piece(i) for i in range(len(tok))]


def load_members(runs: list[str], checkpoint: str = "best", device: str = "auto") -> list[Member]:
    """Load every run; all must share the target vocabulary (same pieces, same ids)."""
    dev = resolve_device(device)
    members = []
    for run in runs:
        model, cfg, src_tok, tgt_tok = load_model(run, checkpoint, dev)
        if cfg.task != "translate":
            raise UserError("only translation models can be combined", run)
        members.append(Member(model, cfg, src_tok, tgt_tok, str(run)))
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


class EnsembleTranslator:
    """Translator-like front end: text in, ``Translation`` objects out (no attention matrices)."""

    def __init__(self, members: list[Member], mode: str = "logprob"):
        self.members = members
        self.ensemble = Ensemble([m.model for m in members], mode)
        self.tgt_tok = members[0].tgt_tok
        self.device = next(members[0].model.parameters()).device

    def _batch(self, member: Member, prepared: list[list[int]]):
        ids = [p or [UNK] for p in prepared]
        if member.cfg.data.reverse_source:
            ids = [seq[::-1] for seq in ids]
        return collate(ids, None, list(range(len(ids)))).to(self.device)

    def translate(
        self,
        lines: list[str],
        beam: int = 5,
        nbest: int = 1,
        batch_size: int = 32,
        length_penalty: float = 1.0,
        max_len_ratio: float = 2.0,
        with_attention: bool = False,
        max_len_cap: int = 512,
    ) -> list[list[Translation]]:
        prepared = [[prepare_source(m.cfg, m.src_tok, line) for m in self.members] for line in lines]
        order = sorted(range(len(lines)), key=lambda i: len(prepared[i][0][2]), reverse=True)
        results: list[list[Translation]] = [[] for _ in lines]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batches = [self._batch(m, [prepared[i][k][2] for i in chunk]) for k, m in enumerate(self.members)]
            self.ensemble.bind([(b.src, b.src_lengths) for b in batches])
            src, lengths = batches[0].src, batches[0].src_lengths  # member 0 sets the length limit
            if beam <= 1:
                hyps = greedy_search(self.ensemble, src, lengths, max_len_ratio, max_len_cap=max_len_cap)
            else:
                hyps = beam_search(self.ensemble, src, lengths, beam, nbest, length_penalty, max_len_ratio,
                                   max_len_cap=max_len_cap)
            self.ensemble.bind(None)
            for i, sent_hyps in zip(chunk, hyps):
                results[i] = [self._finish(prepared[i][0][0], h.tokens, h.score) for h in sent_hyps]
        return results

    def _finish(self, src_pieces: list[str], tokens: list[int], score: float) -> Translation:
        return Translation(self.tgt_tok.decode(tokens), score, src_pieces, [self.tgt_tok.piece(i) for i in tokens])


def members_of(translator) -> list[Member]:
    """The models behind a Translator or an EnsembleTranslator."""
    if isinstance(translator, EnsembleTranslator):
        return translator.members
    return [Member(translator.model, translator.cfg, translator.src_tok, translator.tgt_tok)]


def load_translator(
    runs: list[str], checkpoint: str = "best", device: str = "auto", mode: str = "logprob"
) -> Translator | EnsembleTranslator:
    """A Translator for one run, an EnsembleTranslator for several."""
    if mode not in MODES:
        raise UserError(f"--ensemble-mode must be one of {', '.join(MODES)}, not {mode!r}")
    for run in runs:
        if not Path(run).is_dir():
            raise UserError("run directory not found", run)
    if len(runs) == 1:
        return Translator.from_run(runs[0], checkpoint, device)
    return EnsembleTranslator(load_members(runs, checkpoint, device), mode)
