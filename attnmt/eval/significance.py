"""Paired significance tests between systems: sacrebleu's own paired bootstrap resampling
(Koehn 2004) and approximate randomisation (Riezler and Maxwell 2005), for BLEU and chrF.

The first system is the baseline; every other system gets, per metric, its corpus score, the
bootstrap mean μ and half-width of the 95% confidence interval (``ci``: the score lies in
μ ± ci), and the p-value of "its difference from the baseline is chance". sacrebleu reads its
seed from ``SACREBLEU_SEED``; ``paired_test`` sets it for the call only, so a seed gives the same
figures every time. sacrebleu counts a resampled difference as "as large" only when it is
strictly larger (its tests' ``!=`` convention), which gives two line-for-line identical outputs
(or two systems whose resampled scores never differ, such as both at BLEU 0) the smallest
p-value, (0 + 1) / (n + 1); a system whose score equals the baseline's shows no difference to
test, so it gets p = 1 here instead. The same convention makes approximate randomisation give small p-values to
outputs that differ in very few lines (no shuffle's difference can exceed the real one), so each
system's row also says in how many lines it differs from the baseline (``differing_lines``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from attnmt.errors import UserError

TESTS = ("bs", "ar")  # paired bootstrap, approximate randomisation
METRICS = ("bleu", "chrf")


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """SACREBLEU_SEED=seed inside the block (sacrebleu's significance code reads it there)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_test(systems: list[tuple[str, list[str]]], refs: list[str], test: str = "bs",
                samples: int = 0, seed: int = 12345) -> dict:
    """Each system's BLEU and chrF with 95% confidence intervals and, after the first (the
    baseline), p-values against it, by ``test`` ("bs": paired bootstrap, ``samples`` resamples,
    default 1000; "ar": approximate randomisation, ``samples`` trials, default 10000, CI from 1000
    bootstrap resamples). Returns {"test", "samples", "seed", "signatures": {metric: str},
    "systems": [{"name", "bleu": {"score", "mean", "ci", "p_value"}, "chrf": {...}}, ...]}
    (``p_value`` None for the baseline)."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    if test not in TESTS:
        raise UserError(f"unknown paired test {test!r}; use one of {', '.join(TESTS)}")
    if len(systems) < 2:
        raise UserError("a paired test needs two or more systems (the first is the baseline)")
    if samples < 0 or seed < 1:  # sacrebleu reads seed 0 as "unseeded"
        raise UserError("the number of samples must be >= 0 (0: sacrebleu's default) and the seed >= 1")
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise UserError(f"line counts differ: {name} has {len(hyps)} lines, the references have {len(refs)}")
    if not any(r.strip() for r in refs):
        raise UserError("no reference sentences to score against (empty or blank)")
    metrics = {"bleu": BLEU(), "chrf": CHRF()}
    with _sacrebleu_seed(seed):
        paired = PairedTest(systems, metrics, [refs], test_type=test, n_samples=samples,
                            n_ar_confidence=0 if test == "ar" else -1)
        signatures, scores = paired()
    # sacrebleu keys its results by the score names (BLEU, chrF2), in the order of ``metrics``
    names = [k for k in scores if k != "System"]
    out_systems = []
    for i, (name, hyps) in enumerate(systems):
        row: dict = {"name": name, "differing_lines": sum(a != b for a, b in zip(hyps, systems[0][1]))}
        for key, metric_name in zip(METRICS, names):
            r = scores[metric_name][i]
            p = r.p_value
            if i > 0 and r.score == scores[metric_name][0].score:
                p = 1.0  # no difference to test (see the module docstring)
            row[key] = {"score": round(r.score, 2), "mean": _round(r.mean), "ci": _round(r.ci),
                        "p_value": None if i == 0 else round(p, 4)}
        out_systems.append(row)
    return {"test": test, "samples": paired.n_samples, "seed": seed,
            "signatures": {key: str(signatures[n]) for key, n in zip(METRICS, names)},
            "systems": out_systems}


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 2)


def format_table(result: dict, alpha: float = 0.05) -> list[str]:
    """Text lines: one per system, "name  BLEU score (μ ± ci) p=..  chrF ..", * where p < alpha."""
    width = max(len(s["name"]) for s in result["systems"])
    lines = []
    for i, s in enumerate(result["systems"]):
        cells = []
        for key, label in (("bleu", "BLEU"), ("chrf", "chrF")):
            m = s[key]
            cell = f"{label} {m['score']:.2f} (μ {m['mean']:.2f} ± {m['ci']:.2f})"
            if i == 0:
                cell += " baseline"
            else:
                cell += f" p={m['p_value']:.4f}{'*' if m['p_value'] < alpha else ' '}"
            cells.append(cell)
        differ = f"  ({s['differing_lines']} lines differ)" if i else ""
        lines.append(f"{s['name']:<{width}}  " + "  ".join(cells) + differ)
    test = {"bs": "paired bootstrap", "ar": "approximate randomisation"}[result["test"]]
    lines.append(f"{test}, {result['samples']} samples, seed {result['seed']}; * p < {alpha}; "
                 f"{result['signatures']['bleu']}")
    return lines
