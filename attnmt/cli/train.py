"""attnmt train CONFIG.yaml --out RUN [--set section.key=value ...] [--resume] [--max-time S]
[--init-from RUN[:CKPT] [--init-optimizer]] [--tensorboard]"""

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
    p.add_argument("--init-from", metavar="RUN[:CKPT]",
                   help="fine-tune: start from this run's weights (its BEST, or CKPT: last, step-N, N; "
                        "its EMA weights when it has them) and vocabularies; same model config; "
                        "ignored by --resume once the run has a checkpoint")
    p.add_argument("--init-optimizer", action="store_true",
                   help="with --init-from: take that checkpoint's optimizer state too (default: a fresh one)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files to RUN/tensorboard (train.tensorboard=true; "
                        "pip install attnmt[tensorboard])")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import UserError
    from attnmt.train.run import run_training

    if args.init_optimizer and not args.init_from:
        raise UserError("--init-optimizer needs --init-from RUN")
    overrides = list(args.set)
    if args.max_time is not None:
        overrides.append(f"train.max_time={args.max_time}")
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.device:
        overrides.append(f"train.device={args.device}")
    if args.tensorboard:
        overrides.append("train.tensorboard=true")
    summary = run_training(args.config, args.out, overrides, args.resume, init_from=args.init_from,
                           init_optimizer=args.init_optimizer)
    print(dumps(summary))
    return 0
