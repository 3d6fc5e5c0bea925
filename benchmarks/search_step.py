"""The Transformer's search step kernel (kernels/transformer_search.py) against the definition's
step, in one process: a tool for the kernel, not a claim (the claim is the whole commands of
``ct2_rounds.py`` and ``latency_ct2.py``).

    python benchmarks/search_step.py --run exp/race-tf/transformer-256/attnmt --input exp/race-tf/data/test.en
        [--batch-size 64] [--threads 2] [--rounds 4] [--lines N]

Loads the run once (beam 5, bfloat16 products where the CPU has them, one worker on
``--threads`` threads) and translates the first ``--lines`` lines (all by default) in rounds,
the definition's step and the kernel's taking turns (which goes first alternates), with
``--batch-size`` sentences a batch; ``--batch-size 1`` sends each line on its own (a server's
request). Prints each round's two times, then the kernel's time over the definition's (median
of the rounds' ratios) and whether the two wrote the same translations; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a trained attnmt Transformer run")
    ap.add_argument("--input", required=True, help="source text, one sentence a line")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    args = ap.parse_args(argv)
    source = Path(args.input)
    if not (Path(args.run) / "config.yaml").is_file() or not source.is_file() or min(args.batch_size, args.rounds) < 1:
        print(f"search_step: error: need a run ({args.run}/config.yaml), an input file ({args.input}), "
              "--batch-size and --rounds >= 1", file=sys.stderr)
        return 2
    import attnmt
    from attnmt.decode.options import SearchOptions
    from attnmt.models.transformer import Transformer

    torch.set_num_threads(args.threads)
    model = attnmt.load(args.run, checkpoint="last", device="cpu")
    if not isinstance(model._translator.model, Transformer):
        print(f"search_step: error: {args.run} is not a Transformer run", file=sys.stderr)
        return 2
    lines = source.read_text(encoding="utf-8").splitlines()
    lines = lines[: args.lines] if args.lines > 0 else lines
    options = SearchOptions(beam=5, precision="auto", workers=1, batch_size=args.batch_size)
    groups = [[line] for line in lines] if args.batch_size == 1 else [lines]

    def translate(kernel: bool) -> tuple[float, list[str]]:
        Transformer.search_kernel = kernel
        start = time.perf_counter()
        out = [t.text for group in groups for t in model.translate(group, options)]
        return time.perf_counter() - start, out

    translate(False), translate(True)  # warm up: packed weights, kernels
    times: dict[str, list[float]] = {"definition": [], "kernel": []}
    same = True
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        outs = {}
        for kernel in order:
            took, outs[kernel] = translate(kernel)
            times["kernel" if kernel else "definition"].append(took)
        same = same and outs[False] == outs[True]
        print(f"round {r + 1}: definition {times['definition'][-1]:.2f} s, kernel {times['kernel'][-1]:.2f} s")
    Transformer.search_kernel = True
    ratio = statistics.median(k / d for k, d in zip(times["kernel"], times["definition"]))
    result = {"run": args.run, "lines": len(lines), "batch_size": args.batch_size, "threads": args.threads,
              "precision": model._translator.precision,
              "definition_s": [round(t, 3) for t in times["definition"]],
              "kernel_s": [round(t, 3) for t in times["kernel"]], "kernel_over_definition": round(ratio, 3),
              "same_translations": same}
    print(f"the kernel's step: {ratio:.2f}x the definition's time (median of {args.rounds} rounds), "
          f"translations {'identical' if same else 'DIFFERENT'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
