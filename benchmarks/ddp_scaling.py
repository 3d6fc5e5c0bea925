"""Data-parallel training throughput on CPU: 1 process vs ``torchrun --nproc-per-node 2`` (gloo).

    python benchmarks/ddp_scaling.py [--steps 20] [--short 5] [--batch 32] [--hidden 256]

Both runs train the same model on the same synthetic corpus with one torch thread per process
(``OMP_NUM_THREADS=1``, ``train.threads=1``) and ``train.batch_size`` sentences per process and
step, so the 2-process run handles twice the sentences per step.

Two measures:
- wall: sentences per second of training-loop time (the trainer's ``elapsed``: no start-up, no
  validation); ratio 2-process / 1-process, 2.0 = perfect. Only meaningful on otherwise idle cores:
  on a loaded machine the scheduler gives two processes more CPU than one.
- cpu: CPU seconds (all processes, from getrusage) per sentence, with start-up cancelled by
  subtracting a ``--short``-step run from a ``--steps`` run. ``2 * cpu_1 / cpu_2`` is the speedup two
  dedicated cores would give if the processes never waited for each other (an upper bound that
  charges DDP's extra work - gradient all-reduce, bucketing - but not its waiting).
Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(500)]


def write_corpus(directory: Path, n: int = 4000) -> None:
    rng = random.Random(0)
    src, tgt = [], []
    for _ in range(n):
        s = [rng.choice(WORDS) for _ in range(rng.randint(10, 20))]
        src.append(" ".join(s))
        tgt.append(" ".join(w.replace("w", "v") for w in reversed(s)))
    (directory / "train.src").write_text("".join(x + "\n" for x in src))
    (directory / "train.tgt").write_text("".join(x + "\n" for x in tgt))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train(directory: Path, world: int, steps: int, args) -> dict:
    config = directory / "bench.yaml"
    config.write_text(
        f"data: {{train: {directory}/train, src: src, tgt: tgt, tokenizer: word, max_len: 30}}\n"
        f"model: {{layers: 2, hidden: {args.hidden}, embed: {args.hidden}, attention: global, "
        "score: general, dropout: 0.0}\n"
        f"train: {{optimizer: adam, lr: 0.001, warmup: 10, batch_size: {args.batch}, "
        f"max_steps: {steps}, epochs: 100, device: cpu, threads: 1, log_every: 10, "
        "loss_norm: sents}\n"
    )
    run = directory / f"run{world}-{steps}"
    launcher = [sys.executable, "-m", "attnmt"]
    if world > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(world),
            "-m",
            "attnmt",
        ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    cpu = _children_cpu()
    subprocess.run(
        launcher + ["train", str(config), "--out", str(run)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cpu = _children_cpu() - cpu
    end = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()][-1]
    sentences = end["step"] * args.batch * world
    return {
        "world": world,
        "steps": end["step"],
        "elapsed_s": end["elapsed"],
        "sents_per_s": round(sentences / end["elapsed"], 1),
        "cpu_s": round(cpu, 2),
        "load_avg": round(os.getloadavg()[0], 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--short", type=int, default=5, help="steps of the start-up baseline run")
    p.add_argument("--batch", type=int, default=32, help="sentences per process and step")
    p.add_argument("--hidden", type=int, default=256)
    args = p.parse_args()
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_corpus(directory)
        for steps in (args.short, args.steps):
            for world in (1, 2):
                runs[f"w{world}-s{steps}"] = train(directory, world, steps, args)
    wall = {w: runs[f"w{w}-s{args.steps}"]["sents_per_s"] for w in (1, 2)}
    cpu_per_sent = {
        w: (runs[f"w{w}-s{args.steps}"]["cpu_s"] - runs[f"w{w}-s{args.short}"]["cpu_s"])
        / ((args.steps - args.short) * args.batch * w)
        for w in (1, 2)
    }
    result = {
        "benchmark": "ddp_scaling",
        "cpus": os.cpu_count(),
        "steps": args.steps,
        "batch_per_process": args.batch,
        "hidden": args.hidden,
        "runs": runs,
        "wall_sents_per_s": wall,
        "wall_ratio_2_over_1": round(wall[2] / wall[1], 2),
        "cpu_ms_per_sentence": {w: round(1000 * c, 2) for w, c in cpu_per_sent.items()},
        "cpu_bound_speedup_2_over_1": round(2 * cpu_per_sent[1] / cpu_per_sent[2], 2),
    }
    print(json.dumps(result))
    print(
        f"ddp_scaling: wall {wall[1]} -> {wall[2]} sents/s (x{result['wall_ratio_2_over_1']}, "
        f"load avg {runs[f'w2-s{args.steps}']['load_avg']}); CPU per sentence "
        f"{result['cpu_ms_per_sentence'][1]} -> {result['cpu_ms_per_sentence'][2]} ms: "
        f"x{result['cpu_bound_speedup_2_over_1']} on two dedicated cores at best"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
