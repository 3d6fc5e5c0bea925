"""Perplexity of a run, with or without an n-gram LM (NgramRes), per piece and per word.

A language model scores text (one sentence a line), a translation model the targets of a parallel
corpus given their sources; teacher forcing, </s> scored:

    ppl      = exp(−Σ log P(token) / #tokens)                  tokens of the run's tokenizer + </s>
    word_ppl = exp(−Σ log P(token) / (#words + #sentences))    a word's probability is the product of
                                                               its pieces' (Li et al. 2022, §5.1);
                                                               words = whitespace words of the text

Settings, each scored from one neural forward pass and one n-gram query per batch:

    Setting("residual", α)   NgramRes: softmax(φ(h) + α·log P_ng) (α = 0: the neural model alone)
    Setting("interp", λ)     Prob-Inter: λ·P_neural + (1−λ)·P_ng
    Setting("ngram")         the n-gram model alone, in the same token space

``perplexity_report`` is ``attnmt eval`` and its alias ``attnmt score --model`` (the first row only);
``sentence_scores`` / ``sentence_report`` give the same figures per line (``attnmt score
--per-sentence``, ``Model.score(per_sentence=True)``, the model features of ``eval.rerank``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from attnmt.data.batching import iterate_batches, make_batches
from attnmt.data.corpus import read_lines, read_parallel
from attnmt.data.vocab import PAD
from attnmt.errors import UserError
from attnmt.ngram.model import load_ngram
from attnmt.ngram.residual import NgramResidual, check_vocab, combine
from attnmt.progress import progress
from attnmt.runs.loader import Run, load_run, truncation_warning


@dataclass(frozen=True)
class Setting:
    kind: str  # residual | interp | ngram
    value: float = 0.0  # α or λ

    @property
    def label(self) -> str:
        if self.kind == "residual":
            return "neural" if self.value == 0 else f"ngramres alpha={self.value:g}"
        if self.kind == "interp":
            return f"prob-inter lambda={self.value:g}"
        return "ngram"


def configured_setting(head: NgramResidual | None) -> Setting:
    """The setting a loaded run decodes with (``head``: its ``Run.ngram_head``): its n-gram mode
    and α (at the checkpoint's step); the plain network's without a head."""
    if head is not None:
        return Setting(head.mode, head.lam if head.mode == "interp" else head.alpha)
    return Setting("residual", 0.0)


def encode_lines(run: Run, sources: list[str] | None, targets: list[str]) -> tuple[list[int], list, list, list[int]]:
    """(indices of the lines kept, source ids, target ids, whitespace words per kept target) as the
    run reads them; pairs (or LM lines) with an empty side are left out. ``sources`` is None for
    a language model."""
    if sources is not None:
        kept = [i for i, (s, t) in enumerate(zip(sources, targets)) if s.strip() and t.strip()]
        src = run.source_ids([run.source(sources[i]) for i in kept])
        texts = [targets[i] for i in kept]
        tgt = [run.tgt_tok.encode(t) for t in texts]
    else:
        candidates = [i for i, x in enumerate(targets) if x.strip()]
        encoded = [run.tgt_tok.encode(targets[i]) for i in candidates]
        kept = [i for i, ids in zip(candidates, encoded) if ids]
        texts = [targets[i] for i in kept]
        tgt = [ids for ids in encoded if ids]
        src = [[] for _ in tgt]
    return kept, src, tgt, [len(t.split()) for t in texts]


def encode_texts(run: Run, sources: list[str] | None, targets: list[str]) -> tuple[list, list, int]:
    """(source ids, target ids, whitespace words of the targets): ``encode_lines`` summed."""
    _, src, tgt, words = encode_lines(run, sources, targets)
    return src, tgt, sum(words)


def _task_texts(run: Run, sources: list[str] | None, targets: list[str], where: str):
    """``encode_texts`` and the warning about sources the run cuts (None if none)."""
    if run.cfg.task not in ("translate", "lm"):
        raise UserError(f"perplexity is for lm and translate runs, not task {run.cfg.task!r}")
    sources = sources if run.cfg.task == "translate" else None
    src, tgt, words = encode_texts(run, sources, targets)
    if not tgt:
        raise UserError("no sentences to score", where)
    scored = [s for s, t in zip(sources, targets) if s.strip() and t.strip()] if sources is not None else []
    return src, tgt, words, truncation_warning([run], scored)


def read_target_file(path: str, source: str | None) -> tuple[list[str] | None, list[str]]:
    """(lines of ``source`` or None, lines of ``path``): a target file and its source file, read
    before the run is loaded so that a typo does not cost a model load."""
    targets = read_lines(path)
    return (read_lines(source) if source else None), targets


def read_eval_data(run: Run, path: str, source: str | None = None,
                   lines: tuple[list[str] | None, list[str]] | None = None,
                   ) -> tuple[list[list[int]], list[list[int]], int, str | None]:
    """``encode_texts`` of a file and the truncation warning. The file is LM text or, for a
    translation run, a parallel prefix / .tsv in the run's languages; with ``lines`` (from
    ``read_target_file``) it is the target file ``path`` and its sources come from ``source``."""
    if lines is None:
        if run.cfg.task == "translate":
            return _task_texts(run, *read_parallel(path, run.cfg.data.src, run.cfg.data.tgt)[:2], path)
        return _task_texts(run, None, read_lines(path), path)
    srcs, refs = lines
    if run.cfg.task != "translate":  # a language model has no source side
        return _task_texts(run, None, refs, path)
    if srcs is None:
        raise UserError("--src is needed for a translation model's perplexity")
    if len(srcs) != len(refs):
        raise UserError(f"line counts differ: {source} has {len(srcs)} lines, {path} has {len(refs)}")
    return _task_texts(run, srcs, refs, f"{source}, {path}")


@torch.no_grad()
def sentence_settings(model, ngram, settings: list[Setting], src, tgt, device,
                      batch_tokens: int = 3000) -> torch.Tensor:
    """Natural-log probability of each sentence of ``tgt`` (</s> included) under each setting:
    float64 (len(settings), len(tgt)), in the order of ``tgt``.

    model: the plain neural model (φ); ngram: an NgramLM over the same ids, or None.
    """
    scores = torch.zeros(len(settings), len(tgt), dtype=torch.float64)
    model.eval()
    if ngram is not None:
        ngram.to(device)
    with progress(len(tgt), "score", "sentence") as bar:  # a bar only for a command on a terminal
        for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
            _score_batch(model, ngram, settings, batch.to(device), scores)
            bar.update(len(batch.index))
    return scores


def _score_batch(model, ngram, settings: list[Setting], batch, scores: torch.Tensor) -> None:
    """``sentence_settings`` of one batch, written into ``scores`` at the batch's sentences."""
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
    logits = logits.float()
    ng = ngram.sequence_logprobs(batch.tgt_in) if ngram is not None else None
    mask = batch.tgt_out != PAD
    gold = batch.tgt_out.unsqueeze(-1)
    index = batch.index.cpu()
    for i, s in enumerate(settings):
        if s.kind == "ngram":
            logp = ng
        else:
            logp = torch.log_softmax(combine(logits, ng, s.kind, s.value, s.value), dim=-1)
        token = torch.where(mask, logp.gather(-1, gold).squeeze(-1).double(), 0.0)  # (B, T), 0 after </s>
        scores[i, index] = token.sum(1).cpu()


def score_settings(model, ngram, settings: list[Setting], src, tgt, device, batch_tokens: int = 3000) -> list[float]:
    """Total natural-log probability of ``tgt`` (</s> included) under each setting: the sum of
    ``sentence_settings`` (so per-sentence scores always add up to the corpus figure)."""
    return sentence_settings(model, ngram, settings, src, tgt, device, batch_tokens).sum(1).tolist()


def sentence_scores(run: Run, sources: list[str] | None, targets: list[str],
                    batch_tokens: int = 3000) -> list[dict]:
    """One row per line of ``targets`` under the run's configured setting (given ``sources``, one
    per target, for a translation run; None for a language model):

        logprob   Σ log P(piece) over the line's pieces and </s> (natural log)
        tokens    pieces + 1 (</s>);  words: whitespace words of the line
        ppl       exp(−logprob / tokens);  word_ppl: exp(−logprob / (words + 1))

    A line with an empty side is not scored: logprob, ppl and word_ppl None, tokens and words 0.
    """
    kept, src, tgt, words = encode_lines(run, sources if run.cfg.task == "translate" else None, targets)
    rows = [{"line": i + 1, "logprob": None, "tokens": 0, "words": 0, "ppl": None, "word_ppl": None}
            for i in range(len(targets))]
    if not tgt:
        return rows
    logprobs = sentence_settings(run.network, run.ngram, [configured_setting(run.ngram_head)], src, tgt,
                                 run.device, batch_tokens)[0].tolist()
    for i, ids, w, lp in zip(kept, tgt, words, logprobs):
        n = len(ids) + 1
        rows[i].update(logprob=lp, tokens=n, words=w, ppl=math.exp(min(-lp / n, 700)),
                       word_ppl=math.exp(min(-lp / (w + 1), 700)))
    return rows


def sentence_report(run_dir: str, path: str, source: str | None = None, checkpoint: str = "best",
                    device: str = "auto", batch_tokens: int = 4000) -> tuple[list[dict], str | None]:
    """``sentence_scores`` of the target file ``path`` (and its source file ``source`` for a
    translation run) and the warning about sources the run cuts: ``attnmt score --per-sentence``."""
    sources, targets = read_target_file(path, source)
    run = load_run(run_dir, checkpoint, device)
    if run.cfg.task not in ("translate", "lm"):
        raise UserError(f"perplexity is for lm and translate runs, not task {run.cfg.task!r}")
    if run.cfg.task == "translate":
        if sources is None:
            raise UserError("--src is needed for a translation model's perplexity")
        if len(sources) != len(targets):
            raise UserError(f"line counts differ: {source} has {len(sources)} lines, {path} has {len(targets)}")
    else:
        sources = None
    rows = sentence_scores(run, sources, targets, batch_tokens)
    if all(r["logprob"] is None for r in rows):
        raise UserError("no sentences to score", path)
    scored = [s for s, t in zip(sources, targets) if s.strip() and t.strip()] if sources is not None else []
    return rows, truncation_warning([run], scored)


def perplexities(model, ngram, settings: list[Setting], src, tgt, words: int, device,
                 batch_tokens: int = 3000) -> list[dict]:
    """One row per setting: ppl, word_ppl, logprob and the counts they are normalised by."""
    totals = score_settings(model, ngram, settings, src, tgt, device, batch_tokens)
    tokens = sum(len(t) + 1 for t in tgt)
    sents = len(tgt)
    rows = []
    for s, total in zip(settings, totals):
        rows.append({
            "setting": s.label, "kind": s.kind, "value": s.value,
            "ppl": math.exp(min(-total / tokens, 700)),
            "word_ppl": math.exp(min(-total / (words + sents), 700)),
            "logprob": total, "tokens": tokens, "words": words, "sentences": sents,
        })
    return rows


def perplexity_report(
    run_dir: str,
    path: str,
    checkpoint: str = "best",
    device: str = "auto",
    ngram_path: str | None = None,
    alphas: list[float] = (),
    lams: list[float] = (),
    ngram_only: bool = False,
    tune_on: str | None = None,
    batch_tokens: int = 3000,
    pick_on_test: bool = False,
    source: str | None = None,
    target_file: bool = False,
    raw_weights: bool = False,
) -> dict:
    """Perplexity of run ``run_dir`` on ``path`` under its configured setting, or under a grid of
    α (NgramRes) and λ (Prob-Inter) values.

    ``path`` is LM text or a parallel prefix / .tsv; with ``source`` (or ``target_file``) it is a
    target file and ``source`` its source file (``attnmt eval --src``, and ``attnmt score --model``,
    which always reads a target file). A grid's setting is chosen only on a separate tuning file,
    ``tune_on`` ("best"). Choosing it on ``path`` itself is tuning on the test data: only with
    ``pick_on_test``, and then reported as "best_on_test", never as "best". Returns {"model",
    "input", "results": rows, "best": label|None[, "best_on_test"][, "tune_on", "dev"][, "warnings"]}.
    ``raw_weights``: a run trained with train.ema is scored with its raw weights, not the EMA ones."""
    lines = read_target_file(path, source) if source is not None or target_file else None
    if tune_on and pick_on_test:
        raise UserError("--tune-on and --pick-on-test exclude each other: choose on a tuning file or say you chose on the test input")
    if tune_on and Path(tune_on).resolve() == Path(path).resolve():
        raise UserError("--tune-on must be a different file from --input (tuning on the test input)", tune_on)
    run = load_run(run_dir, checkpoint, device, raw_weights=raw_weights)
    model, ngram = run.network, run.ngram
    if ngram_path:
        ngram = load_ngram(ngram_path)
        check_vocab(ngram, run.tgt_tok, ngram_path)
    if any(a < 0 for a in alphas) or any(not 0 <= x <= 1 for x in lams):
        raise UserError("--alpha values must be >= 0 and --lambda values in [0, 1]")
    grid = [Setting("residual", a) for a in alphas] + [Setting("interp", x) for x in lams]
    if (grid and any(s.value != 0 or s.kind == "interp" for s in grid) or ngram_only) and ngram is None:
        raise UserError("this run has no n-gram model; give one with --ngram")
    if (tune_on or pick_on_test) and len(grid) < 2:
        raise UserError(f"{'--tune-on' if tune_on else '--pick-on-test'} needs a grid: several --alpha and/or --lambda values")
    settings = list(dict.fromkeys(([] if grid else [configured_setting(run.ngram_head)]) + grid
                                  + ([Setting("ngram")] if ngram_only else [])))
    device = run.device
    out: dict = {"model": run_dir, "input": path, "best": None, "weights": run.weights}
    warnings = [note for note in [run.raw_weights_note()] if note]
    if tune_on:
        *data, warning = read_eval_data(run, tune_on)
        dev_rows = perplexities(model, ngram, grid, *data, device, batch_tokens)
        out["best"] = grid[min(range(len(grid)), key=lambda i: dev_rows[i]["ppl"])].label
        out["tune_on"] = tune_on
        out["dev"] = dev_rows
        warnings += [f"{tune_on}: {warning}"] if warning else []
    *data, warning = read_eval_data(run, path, source, lines)
    rows = perplexities(model, ngram, settings, *data, device, batch_tokens)
    warnings += [f"{path}: {warning}"] if warning else []
    if pick_on_test:
        out["best_on_test"] = min((r for r in rows if r["kind"] != "ngram"), key=lambda r: r["ppl"])["setting"]
    out["results"] = rows
    if warnings:
        out["warnings"] = warnings
    return out
