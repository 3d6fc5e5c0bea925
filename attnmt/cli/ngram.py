"""attnmt ngram build --order 5 --input TEXT --arpa OUT [--binary OUT] [--vocab-from RUN] [--prune ..]
attnmt ngram ppl --model M --input TEXT [--json]
attnmt ngram query --model M < sentences          per-word and total log10 scores (KenLM style)"""

from __future__ import annotations

import argparse
import json
import sys
import time

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ngram", help="modified Kneser-Ney n-gram LMs: build, perplexity, query")
    cmds = p.add_subparsers(dest="ngram_command", metavar="ACTION")
    cmds.required = True

    b = cmds.add_parser("build", help="estimate an interpolated modified-KN model from text")
    b.add_argument("--order", type=int, default=5, help="n-gram order (default 5)")
    b.add_argument("--input", required=True, help="training text, one sentence per line")
    b.add_argument("--arpa", help="write the model as ARPA (KenLM-compatible)")
    b.add_argument("--binary", help="write the model in attnmt's binary format (fast loading)")
    b.add_argument("--vocab-from", metavar="RUN_DIR",
                   help="tokenise with this training run's target tokenizer so ids match its "
                        "vocabulary (default: whitespace words)")
    b.add_argument("--prune", type=int, nargs="+", metavar="T",
                   help="per-order raw-count thresholds, e.g. 0 0 1 drops singleton 3+-grams")
    b.add_argument("--no-discount-fallback", action="store_true",
                   help="fail instead of using D=0.5,1,1.5 when the discounts cannot be estimated")
    b.set_defaults(func=run_build)

    q = cmds.add_parser("ppl", help="perplexity of a model on a text")
    q.add_argument("--model", required=True, help="ARPA or binary n-gram model")
    q.add_argument("--input", required=True, help="text, one sentence per line")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=run_ppl)

    s = cmds.add_parser("query", help="score sentences read from stdin")
    s.add_argument("--model", required=True, help="ARPA or binary n-gram model")
    s.add_argument("--no-bos", action="store_true", help="do not start from the <s> context")
    s.add_argument("--no-eos", action="store_true", help="do not score </s>")
    s.set_defaults(func=run_query)


def run_build(args: argparse.Namespace) -> int:
    from attnmt.ngram.estimate import FALLBACK_DISCOUNTS
    from attnmt.ngram.model import NgramLM

    if not args.arpa and not args.binary:
        raise UserError("give --arpa and/or --binary to say where the model goes")
    if args.order < 1:
        raise UserError(f"--order must be >= 1, got {args.order}")
    tokenizer = None
    if args.vocab_from:
        from attnmt.data.vocab import load_tokenizer

        tokenizer = load_tokenizer(args.vocab_from, "tgt")
    start = time.perf_counter()
    lm = NgramLM.estimate_text(
        args.input, order=args.order, tokenizer=tokenizer, prune=args.prune,
        discount_fallback=None if args.no_discount_fallback else FALLBACK_DISCOUNTS,
    )
    took = time.perf_counter() - start
    if lm.info.get("discount_fallback"):
        print(f"attnmt: warning: fallback discounts for orders {lm.info['discount_fallback']} "
              "(too little data to estimate them)", file=sys.stderr)
    if args.binary:
        lm.save(args.binary)
    if args.arpa:
        lm.to_arpa(args.arpa)
    counts = " ".join(f"{k}:{n}" for k, n in enumerate(lm.info["counts"], start=1))
    print(f"estimated {lm.order}-gram from {lm.info['tokens']} tokens, "
          f"{lm.info['sentences']} sentences in {took:.1f}s; n-grams {counts}", file=sys.stderr)
    return 0


def _model(path: str):
    from attnmt.ngram.model import load_ngram

    return load_ngram(path)


def run_ppl(args: argparse.Namespace) -> int:
    from attnmt.ngram.corpus import read_lines

    lm = _model(args.model)
    result = lm.perplexity(line for _, line in read_lines(args.input))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"ppl={result['ppl']:.4f} ppl_no_eos={result['ppl_no_eos']:.4f} "
              f"ppl_no_oov={result['ppl_no_oov']:.4f} logprob10={result['logprob10']:.4f} "
              f"words={result['words']} sentences={result['sentences']} oov={result['oov']}")
    return 0


def run_query(args: argparse.Namespace) -> int:
    from attnmt.ngram.corpus import split_words

    lm = _model(args.model)
    total = 0.0
    for line in sys.stdin:
        words = split_words(line)
        scores = lm.full_scores(words, bos=not args.no_bos, eos=not args.no_eos)
        shown = words + ([] if args.no_eos else ["</s>"])
        parts = []
        for w, (score, used, oov) in zip(shown, scores):
            wid = 0 if oov else lm.index.get(w, 0)
            parts.append(f"{w}={wid} {used} {score:.6f}")
        sent = sum(s for s, _, _ in scores)
        total += sent
        print("\t".join(parts) + f"\tTotal: {sent:.6f} OOV: {sum(o for _, _, o in scores)}")
    print(f"Total: {total:.6f}")
    return 0
