"""attnmt ngram build --order 5 --input TEXT --arpa OUT [--binary OUT] [--vocab-from RUN] [--prune ..]
attnmt ngram build --order 5 --prepared DIR --binary OUT     the ids of a prepared corpus
                   [--memory 4G] [--temp DIR]
attnmt ngram ppl --model M --input TEXT [--json]
attnmt ngram query --model M < sentences          per-word and total log10 scores (KenLM style)"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

from attnmt.cli.subcommands import add_group
from attnmt.errors import UserError
from attnmt.jsonio import dumps


def _add_build(cmds: argparse._SubParsersAction) -> None:
    b = cmds.add_parser("build", help="estimate an interpolated modified-KN model from text")
    b.add_argument("--order", type=int, default=5, help="n-gram order (default 5)")
    source = b.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="training text, one sentence per line")
    source.add_argument("--prepared", metavar="DIR",
                        help="a corpus of attnmt data prepare: its training targets' ids, with its "
                             "target tokenizer's vocabulary (no text is read again)")
    b.add_argument("--arpa", help="write the model as ARPA (KenLM-compatible)")
    b.add_argument("--binary", help="write the model in attnmt's binary format (fast loading)")
    b.add_argument("--vocab-from", metavar="RUN_DIR",
                   help="tokenise with this training run's target tokenizer so ids match its "
                        "vocabulary (default: whitespace words)")
    b.add_argument("--prune", type=int, nargs="+", metavar="T",
                   help="per-order raw-count thresholds, e.g. 0 0 1 drops singleton 3+-grams")
    b.add_argument("--no-discount-fallback", action="store_true",
                   help="fail instead of using D=0.5,1,1.5 when the discounts cannot be estimated")
    b.add_argument("--memory", default="25%",
                   help="memory budget, like lmplz -S: e.g. 4G, 512M, or a share of physical "
                        "memory up to 100%%, such as 25%% (the default); the counts are sorted in "
                        "chunks of this size and merged from disk")
    b.add_argument("--temp", metavar="DIR",
                   help="directory for the temporary files (default: the system's temp dir)")
    b.add_argument("--no-progress", action="store_true",
                   help="no progress bars (tokens/s) on stderr; they are only shown on a terminal")
    b.set_defaults(func=run_build)


def _add_ppl(cmds: argparse._SubParsersAction) -> None:
    q = cmds.add_parser("ppl", help="perplexity of a model on a text")
    q.add_argument("--model", required=True, help="ARPA or binary n-gram model")
    q.add_argument("--input", required=True, help="text, one sentence per line")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=run_ppl, progress=True)  # a bar on a terminal (cli/main.py)


def _add_query(cmds: argparse._SubParsersAction) -> None:
    s = cmds.add_parser("query", help="score sentences read from stdin")
    s.add_argument("--model", required=True, help="ARPA or binary n-gram model")
    s.add_argument("--no-bos", action="store_true", help="do not start from the <s> context")
    s.add_argument("--no-eos", action="store_true", help="do not score </s>")
    s.set_defaults(func=run_query)


def register(sub: argparse._SubParsersAction) -> None:
    add_group(sub, "ngram", [_add_build, _add_ppl, _add_query], metavar="ACTION",
              help="modified Kneser-Ney n-gram LMs: build, perplexity, query")


def run_build(args: argparse.Namespace) -> int:
    from attnmt.ngram.arpa import check_arpa_vocab, write_arpa
    from attnmt.ngram.binary import write_binary
    from attnmt.ngram.estimate import FALLBACK_DISCOUNTS
    from attnmt.ngram.stream import estimate_stream, parse_memory

    if not args.arpa and not args.binary:
        raise UserError("give --arpa and/or --binary to say where the model goes")
    if args.order < 1:
        raise UserError(f"--order must be >= 1, got {args.order}")
    memory = parse_memory(args.memory)
    if args.temp and not os.path.isdir(args.temp):
        raise UserError("no such directory", args.temp)
    from attnmt.data.corpus import check_input, check_output, output_group

    from attnmt.runs.checkpoint import run_files

    source = args.input
    if args.prepared:
        if args.vocab_from:
            raise UserError("--prepared brings its own vocabulary: leave --vocab-from out")
        source = prepared_targets(args.prepared)
    else:
        check_input(args.input)
    for flag, out in (("--arpa", args.arpa), ("--binary", args.binary)):
        if out:  # checked before the (long) estimation
            check_output(out, [args.input, *run_files(args.vocab_from)], flag)
    if args.arpa and args.binary and Path(args.arpa).resolve() == Path(args.binary).resolve():
        raise UserError("--arpa and --binary name the same file", args.arpa)
    tokenizer = None
    if args.vocab_from:
        from attnmt.data.vocab import load_tokenizer

        tokenizer = load_tokenizer(args.vocab_from, "tgt")
    start = time.perf_counter()
    vocab, tables, info, cleanup = estimate_stream(
        source, order=args.order, tokenizer=tokenizer, prune=args.prune,
        discount_fallback=None if args.no_discount_fallback else FALLBACK_DISCOUNTS,
        memory=memory, work_dir=args.temp, progress=not args.no_progress and sys.stderr.isatty(),
    )
    try:
        took = time.perf_counter() - start
        if info.get("discount_fallback"):
            print(f"attnmt: warning: fallback discounts for orders {info['discount_fallback']} "
                  "(too little data to estimate them)", file=sys.stderr)
        if args.arpa:
            check_arpa_vocab(args.arpa, vocab)  # before anything is written
        with output_group():  # --binary and --arpa: both files or, on a failure, neither
            if args.binary:
                write_binary(args.binary, vocab, tables, info)
            if args.arpa:
                write_arpa(args.arpa, vocab, tables)
    finally:
        cleanup()
    counts = " ".join(f"{k}:{n}" for k, n in enumerate(info["counts"], start=1))
    print(f"estimated {info['order']}-gram from {info['tokens']} tokens, "
          f"{info['sentences']} sentences in {took:.1f}s; n-grams {counts}", file=sys.stderr)
    return 0


def prepared_targets(path: str):
    """The training targets of a prepared corpus as the streaming estimator's input."""
    from attnmt.data.prepared import open_prepared
    from attnmt.ngram.corpus import PreparedBlocks

    corpus = open_prepared(path)
    tok = corpus.tokenizer("tgt", corpus.lowercase)
    return PreparedBlocks(corpus.split("train").tgt, [tok.piece(i) for i in range(len(tok))])


def _model(path: str):
    from attnmt.ngram.model import load_ngram

    return load_ngram(path)


def run_ppl(args: argparse.Namespace) -> int:
    from attnmt.ngram.corpus import read_lines

    lines = [line for _, line in read_lines(args.input)]
    if not any(line.strip() for line in lines):
        raise UserError("no words to score (the file is empty or blank)", args.input)
    lm = _model(args.model)
    result = lm.perplexity(lines)
    if args.json:
        print(dumps(result))
    else:
        print(f"ppl={result['ppl']:.4f} ppl_no_eos={result['ppl_no_eos']:.4f} "
              f"ppl_no_oov={result['ppl_no_oov']:.4f} logprob10={result['logprob10']:.4f} "
              f"words={result['words']} sentences={result['sentences']} oov={result['oov']}")
    return 0


def run_query(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import iter_stream
    from attnmt.ngram.corpus import split_words

    lm = _model(args.model)
    total = 0.0
    # checked line by line (invalid UTF-8, NUL bytes of a binary file, over-long lines: file:line)
    stdin = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode("utf-8"))
    for _, line in iter_stream(stdin, "<stdin>"):
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
