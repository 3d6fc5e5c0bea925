"""``attnmt analyse <analysis>``: the paper's analyses as tables and PNG figures.

    attnmt analyse lengths --src F --ref F --hyp F [--hyp F2 ...] --out DIR     (Figure 6)
    attnmt analyse curves --run RUN [--run RUN2 ...] --out F.png                  (Figure 5)
    attnmt analyse heatmap --model RUN --input "sentence" --out F.png             (Figure 7)

Each analysis is one sub-command: a function ``_add_<name>(sub)`` that adds its parser and sets
``func`` to a ``run_<name>(args) -> int`` (attnmt/cli/subcommands.py). To add one, write those two
functions and append the adder to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnmt.cli.subcommands import add_group
from attnmt.data.corpus import atomic_output, check_output, output_group
from attnmt.errors import UserError
from attnmt.jsonio import dumps


def _model_args(p: argparse.ArgumentParser, what: str) -> None:
    """--model RUN and --checkpoint, shared by the subcommands that load a training run."""
    p.add_argument("--model", required=True, help=what)
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")


# ---------------------------------------------------------------- lengths


def _add_lengths(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lengths", help="BLEU by source sentence length (<10, 10-20, ... 50+)")
    p.add_argument("--src", required=True, help="source sentences (their length picks the bucket)")
    p.add_argument("--ref", required=True, help="reference translations")
    p.add_argument("--hyp", required=True, action="append", help="system output (repeatable)")
    p.add_argument("--name", action="append", help="label of each --hyp (default: file name)")
    p.add_argument("--out", required=True, metavar="DIR", help="writes lengths.{csv,md,png} here")
    p.set_defaults(func=run_lengths)


def run_lengths(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import read_lines
    from attnmt.eval.lengths import bleu_by_length, write_table
    from attnmt.eval.plots import plot_lengths

    names = args.name or [Path(h).name for h in args.hyp]
    if len(names) != len(args.hyp) or len(set(names)) != len(names):
        raise UserError("give one distinct --name per --hyp")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UserError("--out must be a directory, not a file", args.out)
    src, ref = read_lines(args.src), read_lines(args.ref)
    if not any(line.strip() for line in src):
        raise UserError("no source sentences: nothing to score by length (the file is empty or blank)",
                        args.src)
    if len(ref) != len(src):
        raise UserError(f"has {len(ref)} lines, {args.src} has {len(src)}", args.ref)
    if not any(line.strip() for line in ref):
        raise UserError("no reference sentences to score against (the file is blank)", args.ref)
    hyps = {}
    for name, path in zip(names, args.hyp):
        lines = read_lines(path)
        if len(lines) != len(src):
            raise UserError(f"has {len(lines)} lines, {args.src} has {len(src)}", path)
        hyps[name] = lines
    out = Path(args.out)
    if out.is_dir():  # the three outputs, each checked as a file
        for name in ("lengths.csv", "lengths.md", "lengths.png"):
            check_output(out / name, [args.src, args.ref, *args.hyp], "--out")
    rows = bleu_by_length(src, ref, hyps)
    out.mkdir(parents=True, exist_ok=True)
    with output_group():  # the table, its markdown and the figure: all three or none new
        write_table(rows, out / "lengths.csv", out / "lengths.md")
        plot_lengths(rows, names, out / "lengths.png")
    sys.stdout.write((out / "lengths.md").read_text(encoding="utf-8"))
    return 0


# ---------------------------------------------------------------- curves


def _add_curves(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("curves", help="learning curves (perplexity vs updates) from training logs")
    p.add_argument("--run", required=True, action="append", help="training run directory (repeatable)")
    p.add_argument("--label", action="append", help="legend label of each --run (default: its name)")
    p.add_argument("--out", required=True, help="PNG file")
    p.add_argument("--csv", help="also write the points as CSV (run,kind,step,ppl)")
    p.set_defaults(func=run_curves)


def run_curves(args: argparse.Namespace) -> int:
    from attnmt.eval.plots import plot_curves

    labels = args.label or [Path(r).name for r in args.run]
    if len(labels) != len(args.run) or len(set(labels)) != len(labels):
        raise UserError("give one distinct --label per --run")
    from attnmt.runs.checkpoint import run_files

    logs = [f for r in args.run for f in run_files(r)]
    check_output(args.out, logs, "--out")
    if args.csv:
        check_output(args.csv, [args.out, *logs], "--csv")
    plot_curves(dict(zip(labels, args.run)), args.out, args.csv)
    print(f"attnmt: wrote {args.out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- heatmap


def _add_heatmap(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("heatmap", help="attention of one sentence as a heat map")
    _model_args(p, "training run directory")
    p.add_argument("--input", required=True, help="the source sentence")
    p.add_argument("--target", help="force decode this translation instead of translating")
    p.add_argument("--beam", type=int, default=5, help="beam size of the translation drawn (without --target); 1 = greedy")
    p.add_argument("--timing", default="predicted", choices=["predicted", "input", "paper"],
                   help="which attention row belongs to a target piece (attnmt/decode/force.py)")
    p.add_argument("--out", required=True, help="PNG file")
    p.add_argument("--csv", help="also write the matrix as CSV (rows: target pieces)")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    p.set_defaults(func=run_heatmap)


def run_heatmap(args: argparse.Namespace) -> int:
    import csv

    from attnmt.decode.ensemble import load_members
    from attnmt.eval.alignment import sentence_attention
    from attnmt.eval.plots import plot_heatmap

    if not args.input.strip():
        raise UserError("--input is empty")
    if args.beam < 1:
        raise UserError("--beam must be at least 1")
    from attnmt.runs.checkpoint import run_files

    read = run_files(args.model)
    check_output(args.out, read, "--out")
    if args.csv:
        check_output(args.csv, [args.out, *read], "--csv")
    member = load_members([args.model], args.checkpoint, args.device)[0]
    found = sentence_attention(member, args.input, args.target, args.beam, args.timing)
    with output_group():  # --out and --csv: both files or, on a failure, neither
        plot_heatmap(found.rows, found.src_pieces, found.tgt_pieces, args.out,
                     f"{getattr(member.cfg.model, 'attention', 'transformer')} "
                     f"({getattr(member.cfg.model, 'score', 'scaled-dot')}), timing: {found.timing}")
        if args.csv:
            with atomic_output(args.csv, newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["target", *found.src_pieces])
                for piece, row in zip(found.tgt_pieces, found.rows.tolist()):
                    writer.writerow([piece, *(f"{x:.4f}" for x in row)])
    if found.translation is not None:  # printed once the figure is written: no output on failure
        print(found.translation)
    print(f"attnmt: wrote {args.out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- windows (Nguyen et al. 2020)


def _add_windows(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("windows", help="soft window masks and attention of a Transformer, per layer")
    _model_args(p, "training run directory (model.type: transformer)")
    p.add_argument("--input", required=True, help="the sentence (source, LM text or text to classify)")
    p.add_argument("--target", help="translation runs: force this output instead of greedy decoding")
    p.add_argument("--out", required=True, metavar="DIR", help="writes <kind>_layerN.png and windows.json")
    p.set_defaults(func=run_windows)


def run_windows(args: argparse.Namespace) -> int:
    from attnmt.eval.windows import analyse_windows

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UserError("--out must be a directory, not a file", args.out)
    report = analyse_windows(args.model, args.input, args.out, args.checkpoint, args.target)
    if "translation" in report:
        print(report["translation"])
    print(f"attnmt: wrote {len(report['layers'])} figures and windows.json to {args.out}", file=sys.stderr)
    return 0


def _add_window_stats(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("window-stats", help="how local a Transformer's learned windows are, per layer, over a corpus")
    _model_args(p, "training run directory (model.type: transformer)")
    p.add_argument("--input", required=True, help="one sentence per line (source, LM text or text to classify)")
    p.add_argument("--target", help="translation runs: force these outputs (line by line) instead of greedy decoding")
    p.add_argument("--limit", type=int, default=200, help="use the first N non-empty lines (default 200)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_window_stats)


def run_window_stats(args: argparse.Namespace) -> int:
    from attnmt.eval.windows import corpus_window_statistics

    if args.limit < 1:
        raise UserError("--limit must be at least 1")
    result = corpus_window_statistics(args.model, args.input, args.target, args.limit, args.checkpoint)
    if not result["layers"]:
        raise UserError("the model has no window attention (all kinds are standard/relative/localness)", args.model)
    if args.json:
        print(dumps(result))
        return 0
    print(f"{result['sentences']} sentences; width = share of keys in the soft window (≈ 0.33 for "
          "position-blind pointers), offset = |window centre − query (self) or diagonal (cross)| / length")
    print("kind\tlayer\tvariant\twidth\thard_width\toffset\tattention_inside")
    for r in result["layers"]:
        print(f"{r['kind']}\t{r['layer']}\t{r['variant']}\t{r['width']:.3f}\t{r['hard_width']:.3f}\t"
              f"{r['offset']:.3f}\t{r['inside']:.3f}")
    return 0


# ---------------------------------------------------------------- classify


def _add_classify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classify", help="accuracy of a classifier run, overall and per group")
    _model_args(p, "training run directory (task: classify)")
    p.add_argument("--input", required=True, help="text<TAB>label[<TAB>group] TSV (or PREFIX of two files)")
    p.add_argument("--group-column", type=int, default=None,
                   help="0-based TSV column to group by, on every line (default: 2 where the file "
                   "has it; agreement data: 2 = attractors)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_classify)


def run_classify(args: argparse.Namespace) -> int:
    from attnmt.eval.classify import evaluate_file

    result = evaluate_file(args.model, args.input, args.checkpoint, args.group_column)
    if args.json:
        print(dumps(result))
        return 0
    print(f"accuracy {result['accuracy']:.4f} (n={result['n']})")
    for group, r in result["by_group"].items():
        print(f"  {group}\t{r['accuracy']:.4f}\t(n={r['n']})")
    return 0


SUBCOMMANDS = [_add_lengths, _add_curves, _add_heatmap, _add_windows, _add_window_stats, _add_classify]


def register(subparsers: argparse._SubParsersAction) -> None:
    add_group(subparsers, "analyse", SUBCOMMANDS, help="analyses: BLEU by length, learning curves, heat maps",
              description="The paper's analyses as tables and PNG figures.", metavar="ANALYSIS")
