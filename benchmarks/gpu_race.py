"""attnmt's Transformer trainer against OpenNMT-py's on one CUDA GPU (issue 37, item 5): the race's
pieces, model and recipe (the peer's config written from attnmt's by race_peers.peer_config), each
side for ``--budget`` seconds of wall clock, one after the other on the same GPU.

    python benchmarks/gpu_race.py --data exp/race-tf/data --budget 150 --size 512 --batch 8192 --out OUT
        [--onmt-python PY] [--vocab DIR] [--device cuda]

Both sides train with mixed precision, as each one's users turn it on: attnmt ``train.amp`` (bfloat16
autocast where the GPU has it), OpenNMT-py ``model_dtype: fp16`` (fp16 autocast and a loss scaler).
Neither validates nor saves a checkpoint inside the budget (attnmt saves its final one at
``train.max_time``), so the rate is the trainer's own. Target pieces/s: attnmt's ``log.jsonl``, the
peer's progress reports (``bsz`` per update), the same arithmetic as ``peer_race.py``'s. GPU memory:
nvidia-smi's ``memory.used`` sampled every 200 ms while a side runs, its peak (the CUDA context
included, on both sides). ``--vocab``: a folder with OpenNMT-py's vocab.en / vocab.es built earlier
from the same pieces (else ``onmt_build_vocab`` runs first, outside the budget). ``--device cpu``
dry-runs the script where there is no GPU (no memory column).

Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # peer_race, race_peers beside this script
import peer_race  # noqa: E402
import race_peers  # noqa: E402

NEVER = 1_000_000  # updates between validations / checkpoints: not within a budget


class MemorySampler:
    """nvidia-smi's used memory (MiB) of GPU 0 sampled while a side runs; ``peak`` after ``stop``."""

    def __init__(self, log: Path, enabled: bool):
        self.log, self.proc = log, None
        if enabled and shutil.which("nvidia-smi"):
            self.out = open(log, "w", encoding="utf-8")
            self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=memory.used",
                                          "--format=csv,noheader,nounits", "-lms", "200"], stdout=self.out)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        self.out.close()
        values = [int(v) for v in self.log.read_text().split() if v.isdigit()]
        return max(values) if values else None


def env_for(threads: int) -> dict:
    """peer_race's environment for attnmt (this checkout first on PYTHONPATH, the machine's own path
    kept: the peer may live in a --target folder there), for both sides."""
    return {**peer_race.attnmt_env(threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def attnmt_side(args, sets: list[str], out: Path) -> dict:
    run_dir = out / "attnmt"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = ["timeout", "-s", "TERM", str(args.budget), sys.executable, "-m", "attnmt", "train",
           str(peer_race.CONFIGS["transformer"]), "--out", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    memory = MemorySampler(out / "attnmt.memory", args.device == "cuda")
    with open(out / "attnmt.train.log", "w", encoding="utf-8") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env_for(args.threads), cwd=peer_race.ROOT)
    peak = memory.stop()
    records, end = peer_race.attnmt_progress(run_dir, args.budget, out / "attnmt.train.log")
    return {**peer_race.rates(records, args.budget, end["step"], end["tokens"]), "gpu_peak_mib": peak}


def opennmt_side(args, cfg, data: Path, out: Path) -> dict:
    import yaml

    run_dir = out / "opennmt"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    config = race_peers.peer_config("opennmt", "transformer", cfg, data, run_dir, "attnmt",
                                    save_every=peer_race.REPORT_EVERY)
    config.update(save_checkpoint_steps=NEVER, model_dtype="fp16" if args.device == "cuda" else "fp32",
                  gpu_ranks=[0] if args.device == "cuda" else [], world_size=1)
    path = run_dir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = env_for(args.threads)
    python = args.onmt_python
    if args.vocab:
        (run_dir / "vocab").mkdir()
        for lang in ("en", "es"):
            shutil.copy(Path(args.vocab) / f"vocab.{lang}", run_dir / "vocab" / f"vocab.{lang}")
    else:
        peer_race.run([python, "-m", "onmt.bin.build_vocab", "-config", str(path), "-n_sample", "-1"],
                      run_dir / "build_vocab.log", env)
    log = run_dir / "train.log"
    memory = MemorySampler(out / "opennmt.memory", args.device == "cuda")
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run(["timeout", str(args.budget), python, "-m", "onmt.bin.train", "-config", str(path)],
                       stdout=f, stderr=subprocess.STDOUT, env=env)
    peak = memory.stop()
    records = race_peers.reports(log)
    if not records:
        raise SystemExit(f"gpu_race: no progress report from OpenNMT-py (see {log})")
    _, steps, tokens = records[-1]
    return {**peer_race.rates(records, args.budget, steps, tokens), "gpu_peak_mib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a peer_race.py data folder (train/dev/test, .sp pieces, spm models)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=int, default=150, help="seconds of wall clock per side")
    ap.add_argument("--size", type=int, default=512, help="d (heads d/64, ff 4d)")
    ap.add_argument("--batch", type=int, default=8192, help="target tokens per update, both sides")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--onmt-python", default=sys.executable, help="the Python that imports onmt")
    ap.add_argument("--vocab", help="OpenNMT-py's vocab.en / vocab.es of the same pieces")
    ap.add_argument("--sides", default="attnmt,opennmt")
    args = ap.parse_args()
    data, out = Path(args.data).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sets = peer_race.attnmt_sets("transformer", data, args.size, args.threads, args.budget,
                                 [f"train.batch_size={args.batch}", f"train.device={args.device}",
                                  f"train.valid_every={NEVER}", f"train.save_every={NEVER}"])
    cfg = peer_race.attnmt_config("transformer", sets)
    row = {"benchmark": "gpu_race", "size": args.size, "batch_tokens": args.batch, "budget_s": args.budget,
           "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        import torch

        row["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
        row["torch"] = torch.__version__
    except Exception as err:  # noqa: BLE001 - reported, not fatal: the sides run in their own processes
        row["device"] = f"unknown ({err})"
    sides = args.sides.split(",")
    for side in sides:
        try:  # one side's failure is reported in the row; the other side still runs
            row[side] = attnmt_side(args, sets, out) if side == "attnmt" else opennmt_side(args, cfg, data, out)
        except (SystemExit, peer_race.RaceError, OSError) as err:
            row[side] = {"error": str(err)}
    done = [side for side in sides if "error" not in row[side]]
    if {"attnmt", "opennmt"} <= set(done):
        row["ratio_tok_s"] = round(row["attnmt"]["tgt_tok_s"] / row["opennmt"]["tgt_tok_s"], 2)
    print(json.dumps(row))
    print("summary: " + "; ".join(
        f"{side} {row[side]['tgt_tok_s']:.0f} target pieces/s ({row[side]['steps']} updates), "
        f"GPU peak {row[side]['gpu_peak_mib']} MiB" if side in done else f"{side} failed: {row[side]['error']}"
        for side in sides) + (f"; attnmt/OpenNMT-py {row['ratio_tok_s']}x" if "ratio_tok_s" in row else ""))
    if len(done) < len(sides):
        sys.exit(1)


if __name__ == "__main__":
    main()
