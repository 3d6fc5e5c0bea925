"""attnmt translate against CTranslate2 on the same trained Bible Transformer, exported.

    python benchmarks/ct2_export_race.py --run RUN [--data data/bible] [--train-steps 800]
        [--quantizations float32,int8] [--rounds 2] [--threads 2]

1. **The model.** RUN is a trained Transformer run (``configs/transformer.yaml``); if RUN does
   not exist it is trained first: ``attnmt train configs/transformer.yaml --out RUN --max-steps
   N`` on ``--threads`` threads (``--set data.*`` to ``--data``; minutes, not timed).
2. **Export.** ``attnmt export --format ctranslate2 --model RUN --out RUN-ct2-Q --quantization Q
   --force`` for each Q of ``--quantizations`` (float32 = no quantization).
3. **Parity.** Greedy (``--beam 1``, batches of 1, so both stop sentences at the same length limit):
   ``attnmt translate --float32`` against ``--engine ctranslate2`` on the float32 export, the
   share of identical test lines (``greedy_same``; 1.0 is the export's claim, tests/test_export.py).
4. **Race.** Each command timed whole from outside (start-up and model load included), rounds
   alternating the commands: ``attnmt translate --model RUN`` and ``attnmt translate --engine
   ctranslate2 --model RUN-ct2-Q`` on the test set, beam 5, batches of 64 sentences,
   OMP_NUM_THREADS = MKL_NUM_THREADS = ``--threads`` (CTranslate2's intra_threads reads it), each
   scored with sacreBLEU's defaults against the raw Spanish test side; ``beam_same``: the share
   of lines equal to attnmt's.

Prints one JSON line per command run, then one JSON object with median times, speed-ups
(attnmt's median ÷ CTranslate2's) and BLEU, and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_race import ROOT, RaceError, attnmt_env, run, score  # noqa: E402


def translate_cmd(model: Path, src: Path, hyp: Path, beam: int, batch: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "attnmt", "translate", "--model", str(model), "--input", str(src),
            "--output", str(hyp), "--beam", str(beam), "--batch-size", str(batch), *flags]


def train_if_missing(run_dir: Path, data: Path, steps: int, env: dict) -> None:
    if (run_dir / "checkpoints").is_dir():
        return
    cmd = [sys.executable, "-m", "attnmt", "train", str(ROOT / "configs" / "transformer.yaml"), "--out",
           str(run_dir), "--max-steps", str(steps), "--set", f"data.train={data}/train", "--set",
           f"data.dev={data}/dev", "--set", f"data.test={data}/test"]
    print(f"training {run_dir} ({steps} updates) ...", file=sys.stderr, flush=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run(cmd, run_dir.with_name(run_dir.name + ".train.log"), env)


def same_share(a: Path, b: Path) -> float:
    x, y = a.read_text(encoding="utf-8").splitlines(), b.read_text(encoding="utf-8").splitlines()
    return round(sum(p == q for p, q in zip(x, y)) / max(len(x), 1), 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a trained Transformer run (trained first if missing)")
    ap.add_argument("--data", default="data/bible", help="{train,dev,test}.{en,es} (attnmt data bible)")
    ap.add_argument("--train-steps", type=int, default=800, help="updates when RUN has to be trained")
    ap.add_argument("--quantizations", default="float32,int8", help="exports to race, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    run_dir, data = Path(args.run), Path(args.data)
    env = attnmt_env(args.threads)
    try:
        src, ref = data / "test.en", data / "test.es"
        if not src.is_file() or not ref.is_file():
            raise RaceError(f"no {src} / {ref} (attnmt data bible --out {data})")
        refs = ref.read_text(encoding="utf-8").splitlines()
        train_if_missing(run_dir, data, args.train_steps, env)
        exports = {}
        for q in args.quantizations.split(","):
            out = run_dir.with_name(f"{run_dir.name}-ct2-{q}")
            run([sys.executable, "-m", "attnmt", "export", "--format", "ctranslate2", "--model", str(run_dir),
                 "--out", str(out), "--force", *([] if q == "float32" else ["--quantization", q])],
                out.with_name(out.name + ".export.log"), env)
            exports[q] = out
        work = run_dir.with_name(run_dir.name + "-race")
        work.mkdir(exist_ok=True)

        parity = {}
        if "float32" in exports:
            ours, theirs = work / "greedy.attnmt.es", work / "greedy.ct2.es"
            run(translate_cmd(run_dir, src, ours, 1, 1, "--float32"), ours.with_suffix(".log"), env)
            run(translate_cmd(exports["float32"], src, theirs, 1, 1, "--engine", "ctranslate2"),
                theirs.with_suffix(".log"), env)
            parity = {"greedy_same": same_share(ours, theirs)}
            print(json.dumps(parity), flush=True)

        cmds = {"attnmt": (translate_cmd(run_dir, src, work / "beam.attnmt.es", 5, 64), work / "beam.attnmt.es")}
        for q, out in exports.items():
            hyp = work / f"beam.ct2-{q}.es"
            cmds[f"ctranslate2 {q}"] = (translate_cmd(out, src, hyp, 5, 64, "--engine", "ctranslate2"), hyp)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        quality: dict[str, dict] = {}
        for rnd in range(1, args.rounds + 1):
            for name, (cmd, hyp) in cmds.items():
                took = run(cmd, hyp.with_suffix(".log"), env)
                quality[name] = score(hyp.read_text(encoding="utf-8").splitlines(), refs)
                times[name].append(round(took, 1))
                print(json.dumps({"round": rnd, "command": name, "seconds": round(took, 1), **quality[name]}),
                      flush=True)
        for name, (_, hyp) in cmds.items():
            quality[name]["beam_same"] = same_share(cmds["attnmt"][1], hyp)
    except (RaceError, subprocess.TimeoutExpired) as err:
        print(f"ct2_export_race: error: {err}", file=sys.stderr)
        return 2
    median = {name: statistics.median(t) for name, t in times.items()}
    speedup = {name: round(median["attnmt"] / median[name], 3) for name in cmds if name != "attnmt"}
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "seconds": times, "median_s": median,
                      "speedup": speedup, "quality": quality, **parity}))
    print(f"attnmt {median['attnmt']} s (BLEU {quality['attnmt']['bleu']}); "
          + "; ".join(f"{n} {median[n]} s ({speedup[n]}x, BLEU {quality[n]['bleu']}, "
                      f"{quality[n]['beam_same']:.0%} lines as attnmt)" for n in speedup)
          + (f"; greedy parity {parity['greedy_same']:.1%}" if parity else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
