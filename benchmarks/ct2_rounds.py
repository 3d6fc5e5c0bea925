"""attnmt's translate command against CTranslate2's on the same weights, in rounds taken in turn:
the comparison that a drifting machine allows (its speed moves by up to ~25 % within minutes,
docs/results/race.md, so two commands timed an hour apart say little).

    python benchmarks/ct2_rounds.py --run exp/race-tf/transformer-256/attnmt --data exp/race-tf/data
        [--rounds 5] [--threads 2] [--compute-type int8] [--python PY] [--ct2-limit 2,10,512]
        [--batch 64] [--variant NAME=FLAGS ...]

``--run``: a Transformer run of ``peer_race.py`` (or any attnmt Transformer run; its sentencepiece
models must be ``DATA/spm.{en,es}.model``, as the race's are). ``--data``: the race's data folder
(``test.en``, ``test.sp.en``, ``test.es``). CTranslate2 translates RUN/ct2 (exported from the run's
last checkpoint with ``attnmt export --format ctranslate2`` when missing, not timed) with
``race_ct2.py translate`` as its own process, at its best layout on a few cores: ``--threads``
translations at once on one thread each (inter_threads; OpenMP and MKL on one thread), beam 5,
batches of ``--batch`` sentences (64, the race's), input in pieces, attnmt's length rule per batch (``--ct2-limit``, race_ct2.py's
``--limit``; '' gives every line 250 pieces, as the race did before 2026-12-05). attnmt runs ``attnmt translate`` (beam 5, the same batches, text in
and out) once per variant: by default ``int8`` (``--int8``), ``bf16`` (no flag: bfloat16 where the
CPU has it), ``int8-complete`` (``--int8 --stop complete``: CTranslate2's stopping rule). Every
command is timed whole from outside; each round runs CTranslate2 first, then the variants.

Prints a line per command, then per variant the mean time, the ratio of CTranslate2's mean to it
(> 1: attnmt faster), each round's ratio, BLEU and chrF (sacrebleu's defaults on detokenised
text); the last line is JSON. ``--python``: the interpreter that has ctranslate2 (default: this one).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_race import CT2_LIMIT, CT2_SCRIPT, attnmt_env, attnmt_translate, run, score, scored_pieces  # noqa: E402
from race_peers import RaceError  # noqa: E402
from race_sides import stamp  # noqa: E402

VARIANTS = {"int8": "--int8", "bf16": "", "int8-complete": "--int8 --stop complete"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="an attnmt Transformer run (peer_race.py's OUT/transformer-D/attnmt)")
    ap.add_argument("--data", required=True, help="peer_race.py's data folder")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute-type", default="int8", help="CTranslate2's compute type")
    ap.add_argument("--python", default=sys.executable, help="a Python with ctranslate2")
    ap.add_argument("--ct2-limit", default=CT2_LIMIT,
                    help="CTranslate2's length rule, race_ct2.py --limit (default attnmt's; '' = 250 pieces a line)")
    ap.add_argument("--batch", type=int, default=64,
                    help="sentences per batch, both engines (the race's: 64; larger batches spread a step's fixed costs)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="an attnmt command to time (repeatable; default: int8, bf16, int8-complete)")
    args = ap.parse_args(argv)
    run_dir, data = Path(args.run), Path(args.data)
    try:
        variants = dict(v.split("=", 1) for v in args.variant) if args.variant else dict(VARIANTS)
    except ValueError:
        print("ct2_rounds: error: --variant must be NAME=FLAGS", file=sys.stderr)
        return 2
    missing = [str(p) for p in (run_dir / "config.yaml", data / "test.en", data / "test.sp.en", data / "test.es")
               if not p.is_file()]
    if args.rounds < 1 or args.batch < 1 or missing:
        why = "missing " + ", ".join(missing) if missing else "--rounds and --batch must be >= 1"
        print(f"ct2_rounds: error: {why}", file=sys.stderr)
        return 2
    env = attnmt_env(args.threads)
    ct2_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    ct2_env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # one thread per replica: its best layout here
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    work = run_dir / "ct2_rounds"
    work.mkdir(exist_ok=True)
    times: dict[str, list[float]] = {"ctranslate2": [], **{name: [] for name in variants}}
    quality: dict[str, dict] = {}
    try:
        ct2_dir = run_dir / "ct2"
        if not (ct2_dir / "model.bin").is_file():
            run([sys.executable, "-m", "attnmt", "export", "--format", "ctranslate2", "--model", str(run_dir),
                 "--out", str(ct2_dir), "--checkpoint", "last", "--force"], work / "export.log", env)
        for r in range(1, args.rounds + 1):
            hyp_sp = work / f"ct2.{r}.sp"
            times["ctranslate2"].append(run(
                [args.python, str(CT2_SCRIPT), "translate", str(ct2_dir), str(data / "test.sp.en"), str(hyp_sp),
                 "--compute-type", args.compute_type, "--threads", "1", "--inter", str(args.threads),
                 "--batch", str(args.batch),
                 *(["--limit", args.ct2_limit] if args.ct2_limit else [])],
                work / f"ct2.{r}.log", ct2_env))
            quality.setdefault("ctranslate2", scored_pieces(hyp_sp, data, refs))
            print(f"round {r} ctranslate2 {args.compute_type}: {times['ctranslate2'][-1]:.2f} s", flush=True)
            for name, flags in variants.items():
                hyp = work / f"{name}.{r}.es"
                batch = [] if args.batch == 64 else ["--batch-size", str(args.batch)]  # the last one counts
                times[name].append(run(attnmt_translate(run_dir, data, hyp, *batch, *shlex.split(flags)),
                                       work / f"{name}.{r}.log", env))
                quality.setdefault(name, score(hyp.read_text(encoding="utf-8").splitlines(), refs))
                print(f"round {r} attnmt {name}: {times[name][-1]:.2f} s", flush=True)
    except RaceError as err:
        print(f"ct2_rounds: error: {err}", file=sys.stderr)
        return 2
    ct2 = times["ctranslate2"]
    result = {"run": str(run_dir), "threads": args.threads, "compute_type": args.compute_type, "batch": args.batch,
              "rounds": args.rounds, **stamp(),
              "ctranslate2": {"mean_s": round(statistics.mean(ct2), 2), "times": [round(t, 2) for t in ct2],
                              **quality["ctranslate2"]}, "attnmt": {}}
    for name in variants:
        mine = times[name]
        ratio = statistics.mean(ct2) / statistics.mean(mine)
        per_round = [round(c / m, 3) for c, m in zip(ct2, mine)]
        result["attnmt"][name] = {"flags": variants[name], "mean_s": round(statistics.mean(mine), 2),
                                  "times": [round(t, 2) for t in mine], "vs_ct2": round(ratio, 3),
                                  "vs_ct2_rounds": per_round, **quality[name]}
        print(f"attnmt {name}: {statistics.mean(mine):.2f} s against CTranslate2's {statistics.mean(ct2):.2f} s: "
              f"{ratio:.2f}x (rounds {min(per_round):.2f}-{max(per_round):.2f}x), BLEU {quality[name]['bleu']} "
              f"vs {quality['ctranslate2']['bleu']}", flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
