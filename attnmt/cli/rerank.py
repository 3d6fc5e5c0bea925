"""attnmt rerank --tune --nbest DEV.nbest --ref DEV.es [--src DEV.en] --features F [F ..] --weights-out W.json
attnmt rerank --nbest TEST.nbest --weights W.json [--src TEST.en] [--ref TEST.es] [-o OUT]

Rerank the n-best lists of `attnmt translate --nbest K` (format: attnmt/eval/nbest.py) by a
weighted sum of features (score, length, ngram=FILE, fwd=RUN, rev=RUN, lm=RUN), the weights tuned
on dev by corpus BLEU; the computation is attnmt/eval/rerank.py."""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rerank", help="rerank n-best lists by weighted features (n-gram, reverse model, "
                       "length), weights tuned on dev BLEU")
    p.add_argument("--nbest", required=True, help="n-best list: 'LINE ||| TEXT ||| SCORE' lines "
                   "(attnmt translate --nbest K)")
    p.add_argument("--src", help="the source lines (needed by fwd=/rev= features; sets the line count)")
    p.add_argument("--ref", help="references: with --tune the dev set; otherwise BLEU before/after to stderr")
    p.add_argument("--features", nargs="+", action="extend", metavar="F",
                   help="with --tune: score, length, ngram=FILE, fwd=RUN, rev=RUN (noisy channel: "
                   "P(source | hypothesis)), lm=RUN")
    p.add_argument("--tune", action="store_true", help="tune the weights on --nbest/--ref (dev BLEU)")
    p.add_argument("--weights-out", help="with --tune: write the weights (JSON) here")
    p.add_argument("--weights", help="a weights file written by --tune (it names the features)")
    p.add_argument("--output", "-o", help="the reranked 1-best translations (default: stdout)")
    p.add_argument("--batch-tokens", type=int, default=3000, help="padded target tokens per batch (run features)")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    p.set_defaults(func=run, progress=True)  # progress bars on a terminal (cli/main.py)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import check_input, check_output, write_lines
    from attnmt.eval.rerank import feature_files, parse_features, read_weights, rerank_files, write_weights

    if args.tune == bool(args.weights):
        raise UserError("give --tune (with --features and --ref) or --weights W.json")
    if args.tune and (not args.features or not args.ref):
        raise UserError("--tune needs --features and --ref (the dev references)")
    if args.weights and args.features:
        raise UserError("--weights names its features; --features is for --tune")
    if args.weights_out and not args.tune:
        raise UserError("--weights-out is written by --tune")
    if args.batch_tokens < 1:
        raise UserError("--batch-tokens must be at least 1")
    weights = None
    if args.weights:
        features, weights = read_weights(args.weights)
    else:
        features = parse_features(args.features)
    for path in (args.nbest, args.src, args.ref):
        if path:
            check_input(path)
    read = [args.nbest, args.src, args.ref, args.weights, *feature_files(features)]
    if args.output:
        check_output(args.output, read, "--output")
    if args.weights_out:
        check_output(args.weights_out, [*read, args.output], "--weights-out")
    out = rerank_files(args.nbest, features, weights, args.src, args.ref, args.tune, args.device,
                       args.batch_tokens)
    if out["tuned"] is not None:
        tuned = out["tuned"]
        weights_text = " ".join(f"{k}={v:.4g}" for k, v in tuned["weights"].items())
        print(f"attnmt: rerank tuned on {args.ref}: BLEU {tuned['dev_bleu']['first']} (1-best) -> "
              f"{tuned['dev_bleu']['reranked']} (reranked); weights {weights_text}", file=sys.stderr)
        if args.weights_out:
            write_weights(args.weights_out, tuned)
    elif out["bleu"] is not None:
        print(f"attnmt: rerank on {args.ref}: BLEU {out['bleu']['first']} (1-best) -> "
              f"{out['bleu']['reranked']} (reranked)", file=sys.stderr)
    if args.output:
        write_lines(args.output, out["texts"])
    elif not args.weights_out:  # --tune --weights-out: the weights are the output
        sys.stdout.write("".join(x + "\n" for x in out["texts"]))
    return 0
