"""attnmt train CONFIG.yaml --out RUN [--set section.key=value ...] [--resume] [--max-time S]"""

from __future__ import annotations

import argparse

from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("config", nargs="?", help="YAML config (optional with --resume)")
    p.add_argument("--out", required=True, help="run directory (checkpoints, vocabularies, logs)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.lr=0.5 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument("--max-time", type=float, help="wall-clock training budget in seconds")
    p.add_argument("--max-steps", type=int, help="stop after this many updates")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.train.training import run_training

    overrides = list(args.set)
    if args.max_time is not None:
        overrides.append(f"train.max_time={args.max_time}")
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.device:
        overrides.append(f"train.device={args.device}")
    summary = run_training(args.config, args.out, overrides, args.resume)
    print(dumps(summary))
    return 0
