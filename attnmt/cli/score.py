"""attnmt score --hyp F --ref F [--json]          BLEU (detokenised and tokenised) and chrF
attnmt score --model RUN --src F --ref F         perplexity per piece and per word: an alias of
                                                 `attnmt eval --model RUN --src F --input F` that
                                                 prints ppl, word_ppl and the counts only"""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError
from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="BLEU/chrF of translations, or a model's perplexity "
                       "(--model: an alias of eval --src)")
    p.add_argument("--hyp", help="system output, one sentence per line")
    p.add_argument("--ref", required=True, help="reference translations")
    p.add_argument("--model", help="run directory: report perplexity (per piece and per word) of "
                   "--ref given --src (an alias of `attnmt eval --src S --input REF`)")
    p.add_argument("--src", help="source side for --model")
    p.add_argument("--lang", help="language of the references for the tokenised BLEU variant: a "
                   "code the Moses tokenizer has rules for, e.g. en, es, de, fr (default en)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.model and args.hyp:  # one of them would be silently unused
        raise UserError("--hyp (BLEU of translations) and --model (perplexity) exclude each other")
    if args.src and not args.model:
        raise UserError("--src needs --model (the source side of a perplexity); BLEU reads --hyp and --ref")
    if args.model and args.lang is not None:
        raise UserError("--lang is for the BLEU of translations (--hyp); --model reports perplexity")
    if args.model:
        from attnmt.eval.perplexity import perplexity_report

        # batch_tokens=4000: what this form always used, so its numbers stay those in docs/
        out = perplexity_report(args.model, args.ref, batch_tokens=4000, source=args.src, target_file=True)
        for warning in out.get("warnings", []):
            print(f"attnmt: warning: {warning}", file=sys.stderr)
        row = out["results"][0]
        result = {"ppl": round(row["ppl"], 3), "word_ppl": round(row["word_ppl"], 3), "tokens": row["tokens"],
                  "words": row["words"]}
    else:
        if not args.hyp:
            raise UserError("give --hyp (to score translations) or --model and --src (perplexity)")
        from attnmt.eval.scoring import DEFAULT_LANG, score_files

        result = score_files(args.hyp, args.ref, DEFAULT_LANG if args.lang is None else args.lang)
    if args.json:
        print(dumps(result))
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))
    return 0
