"""attnmt export --format ctranslate2 --model RUN --out DIR: a run in another engine's format."""

from __future__ import annotations

import argparse

from attnmt.export import QUANTIZATIONS  # no torch import for --help


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a Transformer run as a CTranslate2 model directory")
    p.add_argument("--format", required=True, choices=["ctranslate2"], help="the engine's format")
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--out", required=True, help="model directory to write (new or empty unless --force)")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--quantization", choices=QUANTIZATIONS,
                   help="CTranslate2 weight type (default: float32 weights)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.export.ctranslate2 import export_ctranslate2

    info = export_ctranslate2(args.model, args.out, args.quantization, args.checkpoint, args.force)
    print(f"attnmt: exported {args.model} ({info['checkpoint']}, {info['quantization']}) to {args.out} "
          "(CTranslate2)")
    return 0
