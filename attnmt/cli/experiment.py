"""attnmt experiment luong --train P --dev P --test P --out DIR [--steps N] [--rows a,b,...]

Runs the progressive rows of Luong et al. (2015), Table 1, under one per-row budget and writes
a markdown table, learning curves and BLEU by length (see attnmt/eval/experiment.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.cli.subcommands import add_group


def _add_luong(exp: argparse._SubParsersAction) -> None:
    q = exp.add_parser("luong", help="Luong et al. 2015 Table 1: base, +reverse, +dropout, "
                       "+global (location), +feed, local-p (general), +unk replace, ensemble")
    q.add_argument("--train", required=True, help="training corpus prefix (PREFIX.SRC / PREFIX.TGT) or .tsv")
    q.add_argument("--dev", required=True, help="dev corpus (perplexity during training)")
    q.add_argument("--test", required=True, help="test corpus (BLEU, perplexity)")
    q.add_argument("--src", default="en", help="source language suffix")
    q.add_argument("--tgt", default="es", help="target language suffix (also the tokenised BLEU's language "
                   "when the Moses tokenizer knows it, else its default, en)")
    q.add_argument("--out", required=True, metavar="DIR", help="experiment directory (resumable)")
    q.add_argument("--steps", type=int, default=1000, help="updates per trained row; 0 = config epochs")
    q.add_argument("--layers", type=int, default=2, help="LSTM layers of each trained row")
    q.add_argument("--hidden", type=int, default=256, help="LSTM cells and embedding size")
    q.add_argument("--vocab", type=int, default=10000, help="word vocabulary per side (rest <unk>)")
    q.add_argument("--batch-size", type=int, default=64, help="sentence pairs per training batch")
    q.add_argument("--beam", type=int, default=5, help="beam size of the test translations (BLEU)")
    q.add_argument("--threads", type=int, default=1, help="CPU threads (0 = torch default)")
    q.add_argument("--test-lines", type=int, default=0, help="use only the first N test pairs (0 = all)")
    q.add_argument("--dict", help="src<TAB>tgt word list for the unk-replacement rows")
    q.add_argument("--rows", help="comma-separated subset of rows (default: all)")
    q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every row, e.g. --set train.optimizer=sgd")
    q.set_defaults(func=run_luong)


def register(sub: argparse._SubParsersAction) -> None:
    add_group(sub, "experiment", [_add_luong], metavar="EXPERIMENT",
              help="reproduce a paper's experiment (luong: Table 1 rows)")


def run_luong(args: argparse.Namespace) -> int:
    from attnmt.eval import experiment

    settings = experiment.Settings(
        train=args.train, dev=args.dev, test=args.test, src=args.src, tgt=args.tgt, out=Path(args.out),
        steps=args.steps, layers=args.layers, hidden=args.hidden, vocab=args.vocab,
        batch_size=args.batch_size, beam=args.beam, threads=args.threads, test_lines=args.test_lines,
        dictionary=args.dict, rows=args.rows.split(",") if args.rows else list(experiment.ROW_NAMES), extra=args.set,
    )
    print(experiment.run_luong(settings), end="")
    return 0
