"""attnmt translate --model RUN [--input F] [--output F] [--beam K] [--nbest N] [--alignments F]"""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model")
    p.add_argument("--model", required=True, action="append", help="training run directory")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--input", "-i", help="source text, one sentence per line (default: stdin)")
    p.add_argument("--output", "-o", help="translations (default: stdout)")
    p.add_argument("--beam", type=int, default=5, help="beam size; 1 = greedy")
    p.add_argument("--nbest", type=int, default=1, help="print N best as 'i ||| text ||| score'")
    p.add_argument("--length-penalty", type=float, default=1.0, help="score / length^alpha")
    p.add_argument("--max-len-ratio", type=float, default=2.0, help="output length limit per source token")
    p.add_argument("--max-len-cap", type=int, default=512,
                   help="hard limit on output pieces per line (raise it to translate whole documents)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--stop", default="best", choices=["best", "complete"],
                   help="beam: a sentence is done when its best extension ends (best, as OpenNMT-py) "
                   "or when it has --beam finished hypotheses (complete)")
    p.add_argument("--alignments", help="write Pharaoh word alignments (i-j) of each output here")
    p.add_argument("--device", default="auto")
    p.add_argument("--ensemble-mode", default="logprob", choices=["logprob", "prob"],
                   help="with several --model: average log-probabilities or probabilities")
    p.add_argument("--replace-unk", action="store_true",
                   help="replace each output <unk> by its most-attended source word")
    p.add_argument("--dict", help="with --replace-unk: src<TAB>tgt word list; known words are translated")
    p.add_argument("--unk-timing", default="predicted", choices=["predicted", "input", "paper"],
                   help="attention row of an output word (see attnmt/decode/unk_replace.py)")
    p.add_argument("--ngram", help="NgramRes: this n-gram model (built with --vocab-from the run) "
                   "replaces the run's; the neural weights stay as they are")
    p.add_argument("--alpha", type=float, help="NgramRes: fixed weight of the n-gram log-probabilities")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import read_lines, write_lines
    from attnmt.decode.ensemble import load_translator

    if args.beam < 1 or args.nbest < 1 or args.nbest > max(args.beam, 1):
        raise UserError("--beam and --nbest must be >= 1 and --nbest <= --beam")
    if args.dict and not args.replace_unk:
        raise UserError("--dict needs --replace-unk")
    translator = load_translator(args.model, args.checkpoint, args.device, args.ensemble_mode,
                                 args.ngram, args.alpha)
    if args.input:
        lines = read_lines(args.input)
    else:
        lines = []
        for number, raw in enumerate(sys.stdin.buffer, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise UserError("invalid UTF-8", "<stdin>", number) from None
    results = translator.translate(
        lines, beam=args.beam, nbest=args.nbest, batch_size=args.batch_size,
        length_penalty=args.length_penalty, max_len_ratio=args.max_len_ratio,
        with_attention=bool(args.alignments), max_len_cap=args.max_len_cap, stop=args.stop,
    )
    if args.replace_unk:
        from attnmt.decode.unk_replace import replace_unks_cli

        results = replace_unks_cli(translator, lines, results, args.dict, args.unk_timing)
    out_lines = []
    for i, hyps in enumerate(results):
        if not lines[i].strip():
            hyps = []
        if args.nbest > 1:
            out_lines.extend(f"{i} ||| {h.text} ||| {h.score:.4f}" for h in hyps)
        else:
            out_lines.append(hyps[0].text if hyps else "")
    if args.output:
        write_lines(args.output, out_lines)
    else:
        sys.stdout.write("".join(x + "\n" for x in out_lines))
        sys.stdout.flush()
    if args.alignments:
        write_lines(args.alignments, [hyps[0].pharaoh() if hyps and lines[i].strip() else "" for i, hyps in enumerate(results)])
    return 0
