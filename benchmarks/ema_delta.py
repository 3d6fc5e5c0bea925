"""What train.ema does to test BLEU at the race budget: seeds × {without, with EMA} on the Bible.

For each of ``--seeds`` trains ``configs/demo.yaml`` (the `make demo` model, 680 s of updates by
default: ``--budget``) twice into ``--out``/off-SEED and ``--out``/ema-SEED (``train.ema`` =
``--ema``; a run that already has a checkpoint is reused), translates the Bible test set with each
run's BEST (beam ``--beam``; the EMA run twice: with its EMA weights, as translate loads it, and
with its raw weights, as ``translate --raw-weights``) and scores it with sacrebleu. The EMA run's BEST is chosen by validating the
average, so its raw weights are those of that step, not the raw run's best.

    attnmt data bible --out data/bible
    python benchmarks/ema_delta.py --data data/bible --seeds 1,2,3 --ema 0.999 --out runs/ema-delta
    python benchmarks/ema_delta.py --seeds 1 --budget 120 --ema 0.99   # a quick look
    python benchmarks/ema_delta.py --seeds 1,2,3 --steps 1000 --threads 1 --paired --checkpoint last

``--steps N`` trains N updates instead of a wall-clock budget (quality at equal updates, whatever
else the machine runs); ``--paired`` trains only the EMA runs and compares each with its own raw
weights at the same checkpoint (``--checkpoint last``): the average does not change the updates,
so those raw weights are what the run without EMA would have reached.

Prints one JSON line per seed and a one-line summary (mean BLEU with and without EMA, mean Δ).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def train(out: Path, data: str, seed: int, budget: float, ema: float, steps: int = 0,
          threads: int = 0) -> None:
    if (out / "checkpoints" / "LAST").exists():
        return
    limit = ["--set", "train.max_time=0", "--set", f"train.max_steps={steps}"] if steps else \
        ["--max-time", str(budget)]
    cmd = [sys.executable, "-m", "attnmt", "train", str(ROOT / "configs" / "demo.yaml"), "--out", str(out),
           *limit, "--set", f"train.seed={seed}", "--set", f"train.ema={ema}",
           "--set", f"data.train={data}/train", "--set", f"data.dev={data}/dev"]
    if threads:
        cmd += ["--set", f"train.threads={threads}"]
    subprocess.run(cmd, check=True, cwd=ROOT)


def test_bleu(run: Path, data: str, beam: int, raw: bool = False, checkpoint: str = "best") -> float:
    from attnmt.data.corpus import read_lines
    from attnmt.decode.translate import Translator
    from attnmt.eval.scoring import bleu

    translator = Translator.from_run(run, checkpoint=checkpoint, raw_weights=raw)
    src, ref = read_lines(f"{data}/test.en"), read_lines(f"{data}/test.es")
    hyps = [h[0].text if h else "" for h in translator.translate(src, beam=beam)]
    return bleu(hyps, ref)["bleu"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/bible", help="folder with {train,dev,test}.{en,es}")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--ema", type=float, default=0.999, help="train.ema of the EMA runs")
    ap.add_argument("--budget", type=float, default=680, help="seconds of updates per run (train.max_time)")
    ap.add_argument("--steps", type=int, default=0, help="updates per run instead of --budget (train.max_steps)")
    ap.add_argument("--threads", type=int, default=0, help="train.threads of each run (0: the config's)")
    ap.add_argument("--paired", action="store_true",
                    help="only EMA runs, compared with their own raw weights at --checkpoint")
    ap.add_argument("--checkpoint", default="best", help="best | last: the checkpoint translated")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--out", default="runs/ema-delta", help="folder for the runs")
    args = ap.parse_args()

    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        off, on = Path(args.out) / f"off-{seed}", Path(args.out) / f"ema-{seed}"
        if not args.paired:
            train(off, args.data, seed, args.budget, 0.0, args.steps, args.threads)
        train(on, args.data, seed, args.budget, args.ema, args.steps, args.threads)
        raw = test_bleu(on, args.data, args.beam, raw=True, checkpoint=args.checkpoint)
        row = {"seed": seed, "ema": args.ema, "budget": args.budget, "steps": args.steps,
               "checkpoint": args.checkpoint,
               "bleu_off": raw if args.paired else test_bleu(off, args.data, args.beam, checkpoint=args.checkpoint),
               "bleu_ema": test_bleu(on, args.data, args.beam, checkpoint=args.checkpoint),
               "bleu_ema_run_raw": raw}
        row["delta"] = round(row["bleu_ema"] - row["bleu_off"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    mean = {k: round(statistics.mean(r[k] for r in rows), 2) for k in ("bleu_off", "bleu_ema", "delta")}
    per_seed = ", ".join(f"{r['delta']:+.2f}" for r in rows)
    size = f"{args.steps} updates" if args.steps else f"{args.budget:.0f} s"
    print(json.dumps({"summary": mean, "seeds": [r["seed"] for r in rows], "paired": args.paired}))
    print(f"ema_delta: train.ema={args.ema}, {len(rows)} seeds, {size} each: test BLEU "
          f"{mean['bleu_off']} without, {mean['bleu_ema']} with EMA (mean Δ {mean['delta']:+.2f}; "
          f"per seed {per_seed})")


if __name__ == "__main__":
    main()
