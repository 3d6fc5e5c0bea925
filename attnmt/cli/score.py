"""attnmt score --hyp F --ref F [--json]          BLEU (detokenised and tokenised) and chrF
attnmt score --hyp A --hyp B .. --ref F --paired-bs | --paired-ar [--samples N] [--seed S] [--json]
                                                 each system's BLEU/chrF with 95% confidence
                                                 intervals, p-values against the first (sacrebleu's
                                                 tests: attnmt/eval/significance.py)
attnmt score --model RUN --src F --ref F         perplexity per piece and per word: an alias of
                                                 `attnmt eval --model RUN --src F --input F` that
                                                 prints ppl, word_ppl and the counts only
attnmt score --model RUN [--src F] --ref F --per-sentence
                                                 one JSON line per line of --ref: logprob, tokens,
                                                 words, ppl, word_ppl (a language model: no --src)"""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError
from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="BLEU/chrF of translations, or a model's perplexity "
                       "(--model: an alias of eval --src)")
    p.add_argument("--hyp", action="append", help="system output, one sentence per line (several "
                   "with --paired-bs/--paired-ar: the first is the baseline)")
    p.add_argument("--ref", required=True, help="reference translations")
    p.add_argument("--model", help="run directory: report perplexity (per piece and per word) of "
                   "--ref given --src (an alias of `attnmt eval --src S --input REF`)")
    p.add_argument("--src", help="source side for --model")
    p.add_argument("--lang", help="language of the references for the tokenised BLEU variant: a "
                   "code the Moses tokenizer has rules for, e.g. en, es, de, fr (default en)")
    p.add_argument("--per-sentence", action="store_true",
                   help="with --model: one JSON line per line of --ref (logprob with </s>, tokens, words, "
                   "ppl, word_ppl; null scores for a skipped empty line)")
    test = p.add_mutually_exclusive_group()
    test.add_argument("--paired-bs", action="store_true",
                      help="several --hyp: sacrebleu's paired bootstrap test against the first")
    test.add_argument("--paired-ar", action="store_true",
                      help="several --hyp: sacrebleu's paired approximate randomisation test against the first")
    p.add_argument("--samples", type=int, help="resamples (bs, default 1000) or trials (ar, default 10000)")
    p.add_argument("--seed", type=int, help="the paired test's random seed (>= 1; default 12345, sacrebleu's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, progress=True)  # progress bars on a terminal (cli/main.py)


def run(args: argparse.Namespace) -> int:
    paired = args.paired_bs or args.paired_ar
    if args.model and args.hyp:  # one of them would be silently unused
        raise UserError("--hyp (BLEU of translations) and --model (perplexity) exclude each other")
    if args.src and not args.model:
        raise UserError("--src needs --model (the source side of a perplexity); BLEU reads --hyp and --ref")
    if args.model and args.lang is not None:
        raise UserError("--lang is for the BLEU of translations (--hyp); --model reports perplexity")
    if args.per_sentence and not args.model:
        raise UserError("--per-sentence needs --model (per-line log-probabilities of --ref)")
    if paired and (args.model or args.lang is not None):
        raise UserError("--paired-bs/--paired-ar compare several --hyp files (sacrebleu BLEU and chrF)")
    if args.hyp and len(args.hyp) > 1 and not paired:
        raise UserError("several --hyp files are compared with --paired-bs or --paired-ar")
    if (args.samples is not None or args.seed is not None) and not paired:
        raise UserError("--samples and --seed are for --paired-bs/--paired-ar")
    if paired:
        return _paired(args)
    if args.model and args.per_sentence:
        from attnmt.eval.perplexity import sentence_report

        rows, warning = sentence_report(args.model, args.ref, args.src)
        if warning:
            print(f"attnmt: warning: {args.ref}: {warning}", file=sys.stderr)
        sys.stdout.write("".join(dumps(r) + "\n" for r in rows))
        return 0
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

        result = score_files(args.hyp[0], args.ref, DEFAULT_LANG if args.lang is None else args.lang)
    if args.json:
        print(dumps(result))
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))
    return 0


def _paired(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import read_lines
    from attnmt.eval.significance import format_table, paired_test

    if not args.hyp or len(args.hyp) < 2:
        raise UserError("--paired-bs/--paired-ar need two or more --hyp files (the first is the baseline)")
    refs = read_lines(args.ref)
    systems = []
    for path in args.hyp:
        hyps = read_lines(path)
        if len(hyps) != len(refs):
            raise UserError(f"line counts differ: {path} has {len(hyps)} lines, {args.ref} has {len(refs)}")
        systems.append((path, hyps))
    result = paired_test(systems, refs, "bs" if args.paired_bs else "ar", args.samples or 0,
                         12345 if args.seed is None else args.seed)
    if args.json:
        print(dumps(result))
    else:
        print("\n".join(format_table(result)))
    return 0
