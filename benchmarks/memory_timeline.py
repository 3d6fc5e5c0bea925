"""The memory of an ``attnmt train`` command over its updates: PSS of each process, each second.

    python benchmarks/memory_timeline.py --run RUN [--from-step 300] [--every 10] -- \
        python -m attnmt train CONFIG --out RUN --set ...

Runs the command after ``--`` and samples, each second, the PSS of every process in its tree
(the trainer, its row workers, torchrun's ranks) with the last update that RUN/log.jsonl records.
Prints every ``--every``-th sample (seconds, update, MB per process) and a JSON line: the peak of
the tree's sum, and its mean and largest value over the samples from update ``--from-step`` up to
the last update (the plateau of a long run: not the first updates' growth, not the final
validation). docs/results/scale.md uses it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scale_data import tree_pids


def pss_mb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(x.split()[1]) // 1024 for x in f if x.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def last_step(run: Path) -> int:
    try:
        lines = (run / "log.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    steps = [r["step"] for r in map(json.loads, lines) if r.get("event") == "train"]
    return steps[-1] if steps else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="the run folder the command writes (its log.jsonl)")
    p.add_argument("--from-step", type=int, default=0, help="the plateau's samples start at this update")
    p.add_argument("--every", type=int, default=10, help="print every N-th sample")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    proc = subprocess.Popen(command, start_new_session=True)
    start, samples = time.time(), []
    while proc.poll() is None:
        per = {pid: pss_mb(pid) for pid in sorted(tree_pids(proc.pid))}
        step = last_step(Path(args.run))
        samples.append((step, sum(per.values())))
        if (len(samples) - 1) % args.every == 0:
            print(f"{time.time() - start:7.1f} s  update {step:6d}  " +
                  "  ".join(f"{pid}:{mb}" for pid, mb in per.items()), flush=True)
        time.sleep(1.0)
    final = max((step for step, _ in samples), default=0)  # its last update: the final validation
    plateau = [mb for step, mb in samples if args.from_step <= step < final]
    print(json.dumps({"rc": proc.returncode, "peak_mb": max((mb for _, mb in samples), default=0),
                      "from_step": args.from_step,
                      "plateau_mean_mb": round(sum(plateau) / len(plateau)) if plateau else None,
                      "plateau_max_mb": max(plateau, default=None)}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
