"""The Bible race's training in two checkouts of attnmt: the same losses, and the tokens/s.

    python benchmarks/bible_checkouts.py --checkouts OLD,NEW --data data/bible [--spm-dir exp/race-tf/data]
        [--config configs/race-transformer.yaml] [--steps 300] [--rounds 2] [--threads 2] [--set K=V ...]

Each round trains ``--config`` on ``DATA/train.{en,es}`` (the sentencepiece models of ``--spm-dir``:
``spm.{en,es}.model``, as the race gives them) for ``--steps`` updates in every checkout, one at a
time, the order rotated each round, with its own ``attnmt`` (the checkout's folder first on
PYTHONPATH). From each run's log.jsonl: the loss of every logged update (``same_losses``: the
checkouts trained on the same batches to the same numbers) and the steady target tokens/s after
the first 50 updates (with ``--steps`` at least 100). Prints one JSON line per run and a summary line per checkout (median
tokens/s, and the ratio to the first checkout's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train(checkout: Path, args, out: Path) -> dict:
    sets = [f"data.train={Path(args.data).resolve()}/train", "data.dev=",
            f"train.max_steps={args.steps}", "train.log_every=25", f"train.threads={args.threads}", *args.set]
    if args.spm_dir:  # the race's given models; without, each checkout learns the config's own
        sets += [f"data.src_spm={Path(args.spm_dir).resolve()}/spm.en.model",
                 f"data.tgt_spm={Path(args.spm_dir).resolve()}/spm.es.model"]
    cmd = [sys.executable, "-m", "attnmt", "train", str((checkout / args.config).resolve()), "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"bible_checkouts: {checkout} failed: {done.stderr.strip().splitlines()[-1:]}")
    records = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["event"] == "train"]
    late = [r for r in steps if r["step"] >= 50]
    rate = (late[-1]["tokens"] - late[0]["tokens"]) / max(late[-1]["elapsed"] - late[0]["elapsed"], 1e-9)
    return {"checkout": str(checkout), "tok_s": round(rate, 1),
            "losses": [round(r["loss"], 9) for r in steps]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkouts", required=True, help="comma-separated attnmt checkouts")
    p.add_argument("--data", default=str(ROOT / "data/bible"), help="folder with train.{en,es}")
    p.add_argument("--spm-dir", help="folder with spm.{en,es}.model (default: the config's tokenizers, "
                   "learnt by each run)")
    p.add_argument("--config", default="configs/race-transformer.yaml", help="config, relative to a checkout")
    p.add_argument("--steps", type=int, default=300, help="updates per run")
    p.add_argument("--rounds", type=int, default=2, help="runs per checkout")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    args = p.parse_args(argv)
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    runs: dict[Path, list[dict]] = {c: [] for c in checkouts}
    work = Path(tempfile.mkdtemp(prefix="bible-checkouts-"))
    try:
        for r in range(args.rounds):
            for c in checkouts[r % len(checkouts):] + checkouts[: r % len(checkouts)]:
                row = train(c, args, work / f"{c.name}-{r}")
                print(json.dumps({"round": r, **{k: v for k, v in row.items() if k != "losses"}}), flush=True)
                runs[c].append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(x["tok_s"] for x in runs[checkouts[0]])
    same = len({json.dumps(x["losses"]) for rows in runs.values() for x in rows}) == 1
    for c in checkouts:
        med = statistics.median(x["tok_s"] for x in runs[c])
        print(json.dumps({"checkout": str(c), "tok_s_median": med, "ratio": round(med / base, 3),
                          "tok_s": [x["tok_s"] for x in runs[c]], "same_losses": same}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
