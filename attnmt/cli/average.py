"""attnmt average --model RUN --last N --out RUN2: average a run's last N checkpoints."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the last N checkpoints of a run into a new run")
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--last", type=int, required=True, help="how many of the newest checkpoints")
    p.add_argument("--out", required=True, help="new run directory to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.train.averaging import average_checkpoints

    out = average_checkpoints(args.model, args.last, args.out)
    print(f"attnmt: averaged {args.last} checkpoints of {args.model} into {out}")
    return 0
