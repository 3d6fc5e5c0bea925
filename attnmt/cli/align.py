"""attnmt align --model RUN [--model RUN2 ...] --src F --tgt F --output F [--gold F]

Force-decodes each reference and writes, per line, each target word's most-attended source word in
Pharaoh format (0-based ``i-j``: source word i, target word j); with --gold also prints AER
(``attnmt aer`` scores such a file on its own).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("align", help="word alignments from attention by force decoding references")
    p.add_argument("--model", required=True, action="append",
                   help="training run directory (repeat for an ensemble: attention averaged)")
    p.add_argument("--checkpoint", default="best")
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--tgt", required=True, help="reference translations, one per line")
    p.add_argument("--output", "-o", help="Pharaoh alignments (default: stdout)")
    p.add_argument("--timing", default="predicted", choices=["predicted", "input", "paper"],
                   help="which attention row aligns target word y_j: the step that predicts it "
                        "(predicted, default), the one that reads it (input), or the paper's rule: "
                        "predicted for the location score, input otherwise")
    p.add_argument("--gold", help="also score against these gold alignments and print AER")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import read_lines, write_lines
    from attnmt.decode.ensemble import load_members
    from attnmt.eval.alignment import aer, force_align, pharaoh, read_alignments

    src, tgt = read_lines(args.src), read_lines(args.tgt)
    gold = read_alignments(args.gold) if args.gold else None
    members = load_members(args.model, args.checkpoint, args.device)
    result = force_align(members, src, tgt, args.timing, args.batch_size)
    lines = [pharaoh(links) for links in result.links]
    if args.output:
        write_lines(args.output, lines)
    else:
        sys.stdout.write("".join(x + "\n" for x in lines))
    summary = {"sentences": len(lines), "entropy": round(result.mean_entropy, 4),
               "max_weight": round(result.max_weight, 4)}
    if gold is not None:
        summary.update(aer(result.links, gold).as_dict())
    print("attnmt: align " + json.dumps(summary), file=sys.stderr)
    return 0
