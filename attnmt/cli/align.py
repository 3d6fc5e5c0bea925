"""attnmt align --model RUN [--model RUN2 ...] --src F --tgt F --output F [--gold F]

Force-decodes each reference and writes, per line, each target word's most-attended source word in
Pharaoh format (0-based ``i-j``: source word i, target word j); with --gold also prints AER
(``attnmt aer`` scores such a file on its own).
"""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError
from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("align", help="word alignments from attention by force decoding references")
    p.add_argument("--model", required=True, action="append",
                   help="training run directory (repeat for an ensemble: attention averaged)")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--tgt", required=True, help="reference translations, one per line")
    p.add_argument("--output", "-o", help="Pharaoh alignments (default: stdout)")
    p.add_argument("--timing", default="predicted", choices=["predicted", "input", "paper"],
                   help="which attention row aligns target word y_j: the step that predicts it "
                        "(predicted, default), the one that reads it (input), or the paper's rule: "
                        "predicted for the location score, input otherwise")
    p.add_argument("--gold", help="also score against these gold alignments and print AER")
    p.add_argument("--batch-size", type=int, default=32, help="sentence pairs force-decoded together (memory and speed)")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import check_output, read_lines, write_lines
    from attnmt.decode.ensemble import load_members
    from attnmt.eval.alignment import aer, check_links_fit, force_align, pharaoh, read_alignments
    from attnmt.runs.loader import truncation_warning

    if args.batch_size < 1:
        raise UserError("--batch-size must be at least 1")
    src, tgt = read_lines(args.src), read_lines(args.tgt)
    if len(src) != len(tgt):
        raise UserError(f"line counts differ: {args.src} has {len(src)} lines, {args.tgt} has {len(tgt)}")
    if not any(s.strip() and t.strip() for s, t in zip(src, tgt)):
        raise UserError(f"no sentence pair to align in {args.src} and {args.tgt} (every pair has an "
                        "empty side)")
    gold = read_alignments(args.gold) if args.gold else None
    if gold is not None and len(gold) != len(src):
        raise UserError(f"line counts differ: {args.gold} has {len(gold)} lines, {args.src} has {len(src)}")
    if gold is not None:
        check_links_fit(gold, src, tgt, args.gold)
    if args.output:
        from attnmt.runs.checkpoint import run_files

        check_output(args.output, [args.src, args.tgt, args.gold, *(f for m in args.model for f in run_files(m))],
                     "--output")
    members = load_members(args.model, args.checkpoint, args.device)
    warning = truncation_warning(members, src)
    if warning:
        print(f"attnmt: warning: {warning}", file=sys.stderr)
    result = force_align(members, src, tgt, args.timing, args.batch_size)
    lines = [pharaoh(links) for links in result.links]
    summary = {"sentences": len(lines), "entropy": round(result.mean_entropy, 4),
               "max_weight": round(result.max_weight, 4)}
    if gold is not None:  # scored before anything is written: a bad gold file leaves no output
        summary.update(aer(result.links, gold, (args.output or "the alignments", args.gold)).as_dict())
    if args.output:
        write_lines(args.output, lines)
    else:
        sys.stdout.write("".join(x + "\n" for x in lines))
    print("attnmt: align " + dumps(summary), file=sys.stderr)
    return 0
