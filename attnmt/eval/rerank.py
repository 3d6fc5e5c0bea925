"""Reranking n-best lists (``attnmt rerank``) by a weighted sum of features, weights tuned on dev
by corpus BLEU.

A hypothesis y of source x gets  s(y) = Σ_f w_f · φ_f(x, y)  and each line's highest s is chosen
(ties: the earlier entry, the search's order). Features, named on the command line as KIND or
KIND=ARG (paths as given, relative to the working directory):

    score        the n-best list's own score (the search's log P(y|x) / |y|^α)
    length       whitespace words of y
    ngram=FILE   ln P(y) under an n-gram LM (ARPA or .ngram binary; attnmt/ngram), over the
                 whitespace words of y, <s> context, </s> scored: build it on words (the default
                 of `attnmt ngram build`, no --vocab-from)
    fwd=RUN      ln P(y|x) under a translation run (Σ over pieces and </s>; eval.perplexity)
    rev=RUN      ln P(x|y) under a reverse-direction run: the noisy channel's channel model
    lm=RUN       ln P(y) under a neural language-model run

A run's score of an empty side (an empty hypothesis) is ``EMPTY_LOGPROB``. Run features need the
source lines. Every feature is computed once for all hypotheses, in batches.

Tuning (``tune``) is coordinate ascent: starting from w = (1 on ``score`` or the first feature,
0 elsewhere), each weight in turn takes the value of a grid {0, ±0.1, ±0.25, ±0.5, ±1, ±2, ±4} /
σ_f (σ_f: the feature's standard deviation over the dev hypotheses, so the grid fits every
feature's scale) that gives the highest dev BLEU, the others fixed; a weight moves only on a
strict gain, and passes repeat until one gains nothing (at most ``passes``). BLEU is sacrebleu's
corpus BLEU from per-hypothesis sufficient statistics (n-gram matches and totals, lengths), summed
over the chosen hypotheses, so each grid point costs a sum, not a re-tokenisation. Deterministic.

The weights file (JSON): {"features": ["score", "ngram=lm.ngram", ...], "weights": {"score": 1.0,
"ngram": 0.05, ...}, "dev_bleu": {"first": ..., "reranked": ...}, "signature": ...,
"paths": "relative to this file"}. ``write_weights`` stores each feature's file or run relative
to the weights file's folder (absolute where no relative path leads there, another drive), and
``read_weights`` resolves them from there, so ``rerank --weights`` works from any directory and
with the folder moved as a whole. A file without "paths" (written before) names them relative
to the working directory, as they were given.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from attnmt.errors import UserError
from attnmt.eval.nbest import Entry

KINDS = {"score": False, "length": False, "ngram": True, "fwd": True, "rev": True, "lm": True}  # kind: takes =ARG
EMPTY_LOGPROB = -1000.0
GRID = (0.0, 0.1, -0.1, 0.25, -0.25, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0)


@dataclass(frozen=True)
class Feature:
    kind: str
    arg: str | None = None

    @property
    def spec(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}={self.arg}"


def parse_features(specs: list[str], where: str = "--features") -> list[Feature]:
    """KIND or KIND=ARG strings → features; unknown kinds, a missing or extra ARG and a kind named
    twice are one-line errors naming ``where``."""
    out: list[Feature] = []
    for spec in specs:
        kind, eq, arg = spec.partition("=")
        if kind not in KINDS:
            raise UserError(f"{where}: unknown feature {spec!r}; use {', '.join(k + ('=ARG' if a else '') for k, a in KINDS.items())}")
        if KINDS[kind] and not arg:
            raise UserError(f"{where}: feature {kind} needs {'a file' if kind == 'ngram' else 'a run'}: {kind}=ARG")
        if not KINDS[kind] and eq:
            raise UserError(f"{where}: feature {kind} takes no argument, got {spec!r}")
        if any(f.kind == kind for f in out):
            raise UserError(f"{where}: feature {kind} is named twice")
        out.append(Feature(kind, arg or None))
    if not out:
        raise UserError(f"{where}: no features")
    return out


def feature_files(features: list[Feature]) -> list[str]:
    """The files and run directories the features read (so an output cannot replace one)."""
    return [f.arg for f in features if f.arg is not None]


def compute_features(features: list[Feature], groups: list[list[Entry]], sources: list[str] | None,
                     device: str = "auto", batch_tokens: int = 3000) -> np.ndarray:
    """φ: float64 (H, F) for the H hypotheses of ``groups`` in order (line by line, best first)."""
    flat = [e for g in groups for e in g]
    hyps = [e.text for e in flat]
    src = None if sources is None else [sources[i] for i, g in enumerate(groups) for _ in g]
    columns = []
    for f in features:
        if f.kind == "score":
            columns.append([e.score for e in flat])
        elif f.kind == "length":
            columns.append([len(h.split()) for h in hyps])
        elif f.kind == "ngram":
            from attnmt.ngram.model import load_ngram

            columns.append(load_ngram(f.arg).sentence_logprobs(hyps))
        else:
            columns.append(_run_scores(f, hyps, src, device, batch_tokens))
    return np.array(columns, dtype=np.float64).T.reshape(len(flat), len(features))


def _run_scores(f: Feature, hyps: list[str], sources: list[str] | None, device: str,
                batch_tokens: int) -> list[float]:
    from attnmt.eval.perplexity import sentence_scores
    from attnmt.runs.loader import load_run

    run = load_run(f.arg, "best", device)
    task = run.cfg.task
    if f.kind == "lm" and task != "lm":
        raise UserError(f"feature lm={f.arg}: a {task!r} run, not a language model (use fwd= or rev=)")
    if f.kind in ("fwd", "rev"):
        if task != "translate":
            raise UserError(f"feature {f.spec}: a {task!r} run, not a translation model")
        if sources is None:
            raise UserError(f"feature {f.kind}= scores with the source lines: give --src")
    if f.kind == "lm":
        rows = sentence_scores(run, None, hyps, batch_tokens)
    elif f.kind == "fwd":
        rows = sentence_scores(run, sources, hyps, batch_tokens)
    else:  # noisy channel: the source given the hypothesis
        rows = sentence_scores(run, hyps, sources, batch_tokens)
    return [EMPTY_LOGPROB if r["logprob"] is None else r["logprob"] for r in rows]


def choose(groups: list[list[Entry]], phi: np.ndarray, weights: np.ndarray) -> list[int]:
    """Per line, the index (within its group) of the highest-scoring hypothesis; -1 for none."""
    scores = phi @ weights
    out, start = [], 0
    for g in groups:
        out.append(int(np.argmax(scores[start:start + len(g)])) if g else -1)  # argmax: first of ties
        start += len(g)
    return out


def texts(groups: list[list[Entry]], picks: list[int]) -> list[str]:
    return [g[k].text if k >= 0 else "" for g, k in zip(groups, picks)]


class DevBleu:
    """Corpus BLEU of any choice of one hypothesis per line, from sufficient statistics computed
    once per hypothesis (sacrebleu's matches/totals/lengths; equal to ``BLEU().corpus_score``)."""

    def __init__(self, groups: list[list[Entry]], refs: list[str]):
        from sacrebleu.metrics import BLEU

        self.metric = BLEU(effective_order=True)  # statistics do not depend on it; quiets a warning
        self.groups = groups

        def stats(hyp: str, ref: str) -> list[float]:
            s = self.metric.sentence_score(hyp, [ref])
            return [*s.counts, *s.totals, s.sys_len, s.ref_len]

        self.stats = np.array([stats(e.text, r) for g, r in zip(groups, refs) for e in g]
                              or np.zeros((0, 10)), dtype=np.float64).reshape(-1, 10)
        self.empty = np.array([stats("", r) for g, r in zip(groups, refs) if not g]
                              or np.zeros((0, 10)), dtype=np.float64).reshape(-1, 10).sum(0)
        self.offsets = np.cumsum([0] + [len(g) for g in groups[:-1]])
        self.present = np.array([bool(g) for g in groups])

    def __call__(self, picks: list[int] | np.ndarray) -> float:
        picks = np.asarray(picks)
        rows = self.offsets[self.present] + picks[self.present]
        total = self.stats[rows].sum(0) + self.empty
        from sacrebleu.metrics import BLEU

        return BLEU.compute_bleu(total[:4].tolist(), total[4:8].tolist(), int(total[8]), int(total[9]),
                                 smooth_method="exp").score

    def signature(self) -> str:
        from sacrebleu.metrics import BLEU

        metric = BLEU()  # the signature of corpus BLEU with one reference, as computed here
        metric.corpus_score([""], [[""]])
        return str(metric.get_signature())


def tune(features: list[Feature], groups: list[list[Entry]], phi: np.ndarray, refs: list[str],
         passes: int = 5) -> dict:
    """Coordinate ascent on dev BLEU (module docstring). Returns the weights-file dict."""
    if len(refs) != len(groups):
        raise UserError(f"the n-best list has {len(groups)} lines, the references {len(refs)}")
    bleu = DevBleu(groups, refs)
    w = np.zeros(len(features))
    w[next((i for i, f in enumerate(features) if f.kind == "score"), 0)] = 1.0
    sigma = phi.std(0) if len(phi) else np.ones(len(features))
    sigma = np.where(sigma > 0, sigma, 1.0)
    first = bleu([0] * len(groups))
    best = bleu(choose(groups, phi, w))
    for _ in range(passes):
        gained = False
        for i in range(len(features)):
            for value in GRID:
                trial = w.copy()
                trial[i] = value / sigma[i]
                got = bleu(choose(groups, phi, trial))
                if got > best + 1e-9:
                    best, w, gained = got, trial, True
        if not gained:
            break
    return {"features": [f.spec for f in features],
            "weights": {f.kind: float(x) for f, x in zip(features, w)},
            "dev_bleu": {"first": round(first, 2), "reranked": round(best, 2)},
            "signature": bleu.signature()}


PATHS_NOTE = "relative to this file"


def _moved(feature: Feature, base: str | os.PathLike, to_file: bool) -> Feature:
    """``feature`` with its file or run path made relative to the folder ``base`` (``to_file``)
    or, from there, resolved against it."""
    if feature.arg is None:
        return feature
    if to_file:
        target = os.path.abspath(feature.arg)
        try:
            arg = os.path.relpath(target, os.path.abspath(base))
        except ValueError:  # another drive (Windows): no relative path leads there
            arg = target
    else:
        arg = feature.arg if os.path.isabs(feature.arg) else os.path.normpath(os.path.join(base, feature.arg))
    return Feature(feature.kind, arg)


def weights_vector(features: list[Feature], weights: dict) -> np.ndarray:
    return np.array([weights[f.kind] for f in features], dtype=np.float64)


def read_weights(path: str | os.PathLike) -> tuple[list[Feature], np.ndarray]:
    """(features, weights) of a weights file; a malformed one is a one-line error naming the key."""
    from attnmt.data.corpus import read_lines

    text = "\n".join(read_lines(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"not JSON: {e.msg}", str(path), e.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("features"), list) \
            or not isinstance(data.get("weights"), dict):
        raise UserError("expected a JSON object with 'features' (a list) and 'weights' (an object)", str(path))
    if not all(isinstance(x, str) for x in data["features"]):
        raise UserError("'features' must be a list of strings such as \"ngram=lm.ngram\"", str(path))
    features = parse_features(data["features"], f"{path}: features")
    if data.get("paths") == PATHS_NOTE:  # else an older file: paths as given, from the working directory
        folder = os.path.dirname(os.path.abspath(path))
        features = [_moved(f, folder, to_file=False) for f in features]
    weights = data["weights"]
    for f in features:
        value = weights.get(f.kind)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UserError(f"weights.{f.kind} must be a finite number, got {value!r}", str(path))
    extra = sorted(set(weights) - {f.kind for f in features})
    if extra:
        raise UserError(f"weights.{extra[0]}: not one of the features {[f.kind for f in features]}", str(path))
    return features, weights_vector(features, weights)


def write_weights(path: str | os.PathLike, data: dict) -> None:
    """The weights file (``tune``'s dict), atomically (nothing half-written on a failure), its
    features' paths relative to the file's folder (module docstring)."""
    from attnmt.data.corpus import atomic_output
    from attnmt.jsonio import dumps

    folder = os.path.dirname(os.path.abspath(path))
    features = [_moved(f, folder, to_file=True) for f in parse_features(data["features"])]
    data = {**data, "features": [f.spec for f in features], "paths": PATHS_NOTE}
    with atomic_output(path) as f:
        f.write(dumps(data) + "\n")


def rerank_files(nbest: str, features: list[Feature], weights: np.ndarray | None = None,
                 sources_path: str | None = None, refs_path: str | None = None, tune_weights: bool = False,
                 device: str = "auto", batch_tokens: int = 3000) -> dict:
    """``attnmt rerank``: read the n-best list (and sources, references), compute the features,
    tune (``tune_weights``: needs ``refs_path``) or apply ``weights``. Returns {"texts": the chosen
    hypothesis per line, "tuned": the weights-file dict or None, "bleu": {"first", "reranked"} or
    None (with references)}."""
    from attnmt.data.corpus import read_lines

    if tune_weights and refs_path is None:
        raise UserError("tuning the weights needs the references (--ref)")
    if any(f.kind in ("fwd", "rev") for f in features) and sources_path is None:
        raise UserError(f"features {', '.join(f.spec for f in features if f.kind in ('fwd', 'rev'))} "
                        "score with the source lines: give --src")
    sources = read_lines(sources_path) if sources_path else None
    refs = read_lines(refs_path) if refs_path else None
    if sources is not None and refs is not None and len(sources) != len(refs):
        raise UserError(f"line counts differ: {sources_path} has {len(sources)} lines, {refs_path} has {len(refs)}")
    lines = len(sources) if sources is not None else len(refs) if refs is not None else None
    from attnmt.eval.nbest import read_nbest

    groups = read_nbest(nbest, lines)
    phi = compute_features(features, groups, sources, device, batch_tokens)
    tuned = tune(features, groups, phi, refs) if tune_weights else None
    w = weights_vector(features, tuned["weights"]) if tuned else weights
    picks = choose(groups, phi, w)
    out = {"texts": texts(groups, picks), "tuned": tuned, "bleu": None}
    if refs is not None:
        bleu = DevBleu(groups, refs)
        out["bleu"] = {"first": round(bleu([0] * len(groups)), 2), "reranked": round(bleu(picks), 2)}
    return out
