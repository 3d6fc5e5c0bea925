"""attnmt eval --model RUN --input F [--src F] [--ngram M] [--alpha A[,A..]] [--lambda L[,L..]]
             [--ngram-only] [--tune-on DEV | --pick-on-test] [--json]

Perplexity (per piece and per word) of a language model (``--input``: text, one sentence a line)
or a translation model (``--input``: parallel prefix or .tsv, the run's languages, or the target
file with ``--src`` its source file); the computation is attnmt/eval/perplexity.py.
``attnmt score --model RUN --src S --ref T`` is an alias of ``attnmt eval --model RUN --src S
--input T`` that prints the configured setting's ppl, word_ppl, tokens and words only.
Settings:

    (none)        the run as configured (its n-gram and α at the checkpoint's step, if any)
    --alpha LIST  NgramRes: softmax(φ(h) + α·log P_ng) for each α (α = 0: the neural model alone)
    --lambda LIST Prob-Inter: λ·P_neural + (1−λ)·P_ng for each λ
    --ngram-only  the n-gram model alone, in the same token space

``--ngram M`` swaps the n-gram model (plug and play; the neural weights are not touched).
``--tune-on DEV`` picks the best grid setting on DEV (a file other than --input) and reports it
(and the rest) on --input. Without it a grid is reported row by row and nothing is picked;
``--pick-on-test`` marks the setting best on --input itself, labelled as tuned on the test input.

Word-level perplexity (each word's probability the product of its pieces') is the headline, as in
Li et al. 2022; per-piece perplexity is printed beside it (equal for word tokenizers).
"""

from __future__ import annotations

import argparse
import math
import sys

from attnmt.errors import UserError
from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="perplexity of a model, with or without an n-gram LM (NgramRes)")
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--raw-weights", action="store_true",
                   help="a run trained with train.ema: its raw weights, not the EMA ones (the default)")
    p.add_argument("--input", "-i", required=True,
                   help="LM: text file; translation: parallel prefix (PREFIX.src/.tgt) or .tsv, "
                   "or the target file with --src")
    p.add_argument("--src", help="translation: the source file of --input's targets")
    p.add_argument("--ngram", help="n-gram model to use instead of the run's (same target vocabulary)")
    p.add_argument("--alpha", help="NgramRes α, or a comma-separated grid")
    p.add_argument("--lambda", dest="lam", help="Prob-Inter λ, or a comma-separated grid")
    p.add_argument("--ngram-only", action="store_true", help="also score the n-gram model alone")
    p.add_argument("--tune-on", metavar="DEV", help="choose the best --alpha/--lambda setting on DEV "
                   "(a tuning file other than --input)")
    p.add_argument("--pick-on-test", action="store_true",
                   help="mark the grid setting best on --input itself (an optimistic, test-tuned figure; "
                   "labelled so in the output)")
    p.add_argument("--batch-tokens", type=int, default=3000, help="padded target tokens per batch")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, progress=True)  # progress bars on a terminal (cli/main.py)


def _grid(text: str | None, flag: str) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} expects numbers separated by commas, got {text!r}") from None
    if not values:
        raise UserError(f"{flag} is empty")
    if not all(math.isfinite(v) for v in values):  # a nan weight would print ppl=nan and exit 0
        raise UserError(f"{flag} values must be finite numbers, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    from attnmt.eval.perplexity import perplexity_report

    if args.batch_tokens < 1:
        raise UserError("--batch-tokens must be at least 1")
    out = perplexity_report(
        args.model, args.input, args.checkpoint, args.device, args.ngram,
        _grid(args.alpha, "--alpha"), _grid(args.lam, "--lambda"), args.ngram_only, args.tune_on,
        args.batch_tokens, args.pick_on_test, args.src, raw_weights=args.raw_weights,
    )
    for warning in out.get("warnings", []):
        print(f"attnmt: warning: {warning}", file=sys.stderr)
    if args.json:
        print(dumps(out))
        return 0
    marks = {out["best"]: "  *best on " + str(args.tune_on),
             out.get("best_on_test"): "  *best on the test input itself (tuned on test: optimistic)"}
    for r in out.get("dev", []):
        print(f"dev  {r['setting']:<28} word_ppl={r['word_ppl']:.3f} ppl/piece={r['ppl']:.3f}")
    for r in out["results"]:
        print(f"{r['setting']:<28} word_ppl={r['word_ppl']:.3f} ppl/piece={r['ppl']:.3f} tokens={r['tokens']} "
              f"words={r['words']} sentences={r['sentences']}{marks.get(r['setting'], '')}")
    return 0
