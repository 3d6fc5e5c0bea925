"""Does bfloat16 training keep the model's quality? float32 vs bfloat16 products at equal updates.

The race's model and data (``benchmarks/peer_race.py OUT/data``), trained for the same number of
updates with ``train.amp=false`` (float32) and ``train.amp=true`` (bfloat16 products on a CPU with
bfloat16 units), per seed, one run after the other; then each run's dev perplexity and test
BLEU / chrF with the race's float32 beam search (beam 5, batches of 64).

    python benchmarks/precision_quality.py --data OUT/data --hidden 256 --updates 400 --seeds 1,2 [--out DIR]
    python benchmarks/precision_quality.py --data OUT/data --attention local-p --score general --seeds 1,2,3

(--attention / --score replace the race model's global attention, e.g. to check a local model,
whose decoder trains through fused_rnn.StepLoop.)

Prints one JSON line per run, then one JSON object with the paired differences (bf16 − float32)
per seed, and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_race import ROOT, RaceError, attnmt_env, attnmt_translate, run, score  # noqa: E402


def train_and_score(data: Path, run_dir: Path, hidden: int, updates: int, seed: int, amp: bool, threads: int,
                    model_sets: tuple[str, ...] = ()) -> dict:
    env = attnmt_env(threads)
    attnmt = [sys.executable, "-m", "attnmt"]
    sets = [f"data.train={data / 'train'}", f"data.src_spm={data / 'spm.en.model'}",
            f"data.tgt_spm={data / 'spm.es.model'}", f"model.hidden={hidden}", f"train.threads={threads}",
            f"train.max_steps={updates}", f"train.seed={seed}", f"train.amp={str(amp).lower()}", *model_sets]
    cmd = attnmt + ["train", str(ROOT / "configs" / "race-lstm.yaml"), "--out", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RaceError(f"training failed: {done.stderr.strip()[-300:]}")
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    precision = next(e.get("precision") for e in events if e["event"] == "start")
    ppl = subprocess.run(attnmt + ["score", "--model", str(run_dir), "--src", str(data / "dev.en"),
                                   "--ref", str(data / "dev.es"), "--json"], capture_output=True, text=True, env=env)
    if ppl.returncode != 0:
        raise RaceError(f"attnmt score failed: {ppl.stderr.strip()[-200:]}")
    hyp = run_dir / "test.hyp.es"
    run(attnmt_translate(run_dir, data, hyp), run_dir / "translate.log", env)
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    result = score(hyp.read_text(encoding="utf-8").splitlines(), refs)
    return {"seed": seed, "amp": amp, "precision": precision, "train_s": round(took, 1),
            "dev_ppl": round(json.loads(ppl.stdout)["ppl"], 2), **result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the race's prepared data folder (peer_race.py OUT/data)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--updates", type=int, default=400)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/precision_quality")
    ap.add_argument("--attention", help="model.attention instead of the race model's (global)")
    ap.add_argument("--score", help="model.score instead of the race model's")
    args = ap.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    if not (data / "spm.en.model").is_file():
        print(f"precision_quality: {data / 'spm.en.model'}: missing (run benchmarks/peer_race.py first)",
              file=sys.stderr)
        return 2
    model_sets = tuple(f"model.{key}={value}" for key, value in
                       (("attention", args.attention), ("score", args.score)) if value)
    pairs = []
    try:
        for seed in (int(s) for s in args.seeds.split(",")):
            pair = {}
            for amp in (False, True):
                rec = train_and_score(data, out / f"h{args.hidden}-s{seed}-{'bf16' if amp else 'fp32'}",
                                      args.hidden, args.updates, seed, amp, args.threads, model_sets)
                print(json.dumps(rec), flush=True)
                pair[amp] = rec
            if pair[True]["precision"] != "bf16 products":
                raise RaceError("train.amp did not train in bfloat16 here (no bfloat16 units on this CPU)")
            pairs.append({"seed": seed, **{k: round(pair[True][k] - pair[False][k], 2)
                                           for k in ("dev_ppl", "bleu", "chrf", "train_s")}})
    except RaceError as err:
        print(f"precision_quality: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"hidden": args.hidden, "updates": args.updates, "model": list(model_sets),
                      "bf16_minus_fp32": pairs}))
    print(f"hidden {args.hidden}, {args.updates} updates: bf16 − float32 per seed: "
          + "; ".join(f"seed {p['seed']}: dev ppl {p['dev_ppl']:+}, BLEU {p['bleu']:+}, train s {p['train_s']:+}"
                      for p in pairs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
