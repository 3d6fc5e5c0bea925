"""attnmt's translate command against CTranslate2's on the same weights, in rounds taken in turn:
the comparison that a drifting machine allows (its speed moves by up to ~25 % within minutes,
docs/results/race.md, so two commands timed an hour apart say little).

    python benchmarks/ct2_rounds.py --run exp/race-tf/transformer-256/attnmt --data exp/race-tf/data
        [--rounds 5] [--threads 2] [--compute-type int8] [--python PY] [--ct2-limit 2,10,512]
        [--batch 16,32,64,128] [--variant NAME=FLAGS ...]

``--run``: a Transformer run of ``peer_race.py`` (or any attnmt Transformer run; its sentencepiece
models must be ``DATA/spm.{en,es}.model``, as the race's are). ``--data``: the race's data folder
(``test.en``, ``test.sp.en``, ``test.es``). CTranslate2 translates RUN/ct2 (exported from the run's
last checkpoint with ``attnmt export --format ctranslate2`` when missing, not timed) with
``race_ct2.py translate`` as its own process, at its best layout on a few cores: ``--threads``
translations at once on one thread each (inter_threads; OpenMP and MKL on one thread), beam 5,
input in pieces, attnmt's length rule per batch (``--ct2-limit``, race_ct2.py's ``--limit``; ''
gives every line 250 pieces, as the race did before 2026-12-05). attnmt runs ``attnmt translate``
(beam 5, text in and out) once per variant: by default ``int8`` (``--int8``), ``bf16`` (no flag:
bfloat16 where the CPU has it), ``int8-complete`` (``--int8 --stop complete``: CTranslate2's
stopping rule). Every command is timed whole from outside; each round runs, per batch size in
turn, CTranslate2 first, then the variants.

``--batch``: sentences per batch, one size or several (both engines get each). The engines are
fastest at different sizes (on a 2-vCPU Intel Xeon, CTranslate2 at 16-32, attnmt at 32-128;
docs/results/race.md), so the comparison is **each engine at its own best size** (the size of
its least mean time): that is the headline ratio; the ratio at every size is printed beside it.

Prints a line per command; per batch size each variant's ratio at that size; per variant its best
size, mean time, the ratio of CTranslate2's best mean to it (> 1: attnmt faster) and each round's
(the two best sizes' times in that round), BLEU and chrF (sacrebleu's defaults on detokenised
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
    ap.add_argument("--batch", default="64",
                    help="sentences per batch, both engines: one size or several, comma-separated (the race's: 64)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="an attnmt command to time (repeatable; default: int8, bf16, int8-complete)")
    args = ap.parse_args(argv)
    run_dir, data = Path(args.run), Path(args.data)
    try:
        variants = dict(v.split("=", 1) for v in args.variant) if args.variant else dict(VARIANTS)
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        print("ct2_rounds: error: --variant must be NAME=FLAGS and --batch sizes integers", file=sys.stderr)
        return 2
    missing = [str(p) for p in (run_dir / "config.yaml", data / "test.en", data / "test.sp.en", data / "test.es")
               if not p.is_file()]
    if args.rounds < 1 or min(batches) < 1 or missing:
        why = "missing " + ", ".join(missing) if missing else "--rounds and --batch must be >= 1"
        print(f"ct2_rounds: error: {why}", file=sys.stderr)
        return 2
    env = attnmt_env(args.threads)
    ct2_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    ct2_env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # one thread per replica: its best layout here
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    work = run_dir / "ct2_rounds"
    work.mkdir(exist_ok=True)
    engines = ["ctranslate2", *variants]
    times: dict[tuple[str, int], list[float]] = {(e, b): [] for e in engines for b in batches}
    quality: dict[tuple[str, int], dict] = {}
    try:
        ct2_dir = exported(run_dir, work / "export.log", env)
        for r in range(1, args.rounds + 1):
            for b in batches:
                tag = f"{r}" if len(batches) == 1 else f"b{b}.{r}"
                hyp_sp = work / f"ct2.{tag}.sp"
                times["ctranslate2", b].append(run(
                    [args.python, str(CT2_SCRIPT), "translate", str(ct2_dir), str(data / "test.sp.en"), str(hyp_sp),
                     "--compute-type", args.compute_type, "--threads", "1", "--inter", str(args.threads),
                     "--batch", str(b), *(["--limit", args.ct2_limit] if args.ct2_limit else [])],
                    work / f"ct2.{tag}.log", ct2_env))
                quality.setdefault(("ctranslate2", b), scored_pieces(hyp_sp, data, refs))
                print(f"round {r} batch {b} ctranslate2 {args.compute_type}: {times['ctranslate2', b][-1]:.2f} s",
                      flush=True)
                for name, flags in variants.items():
                    hyp = work / f"{name}.{tag}.es"
                    size = [] if b == 64 else ["--batch-size", str(b)]  # after the race's 64: the last one counts
                    times[name, b].append(run(attnmt_translate(run_dir, data, hyp, *size, *shlex.split(flags)),
                                              work / f"{name}.{tag}.log", env))
                    quality.setdefault((name, b), score(hyp.read_text(encoding="utf-8").splitlines(), refs))
                    print(f"round {r} batch {b} attnmt {name}: {times[name, b][-1]:.2f} s", flush=True)
    except RaceError as err:
        print(f"ct2_rounds: error: {err}", file=sys.stderr)
        return 2
    result = summarise(times, quality, variants, batches)
    result = {"run": str(run_dir), "threads": args.threads, "compute_type": args.compute_type,
              "rounds": args.rounds, **stamp(), **result}
    ct2 = result["ctranslate2"]
    for b in batches if len(batches) > 1 else []:
        row = result["by_batch"][str(b)]
        print(f"batch {b}: CTranslate2 {row['ctranslate2']:.2f} s; " + ", ".join(
            f"attnmt {name} {row[name]['mean_s']:.2f} s ({row[name]['vs_ct2']:.2f}x)" for name in variants), flush=True)
    for name, mine in result["attnmt"].items():
        rounds = mine["vs_ct2_rounds"]
        print(f"attnmt {name} (batches of {mine['batch']}): {mine['mean_s']:.2f} s against CTranslate2's "
              f"{ct2['mean_s']:.2f} s (batches of {ct2['batch']}): {mine['vs_ct2']:.2f}x (rounds "
              f"{min(rounds):.2f}-{max(rounds):.2f}x), BLEU {mine['bleu']} vs {ct2['bleu']}", flush=True)
    print(json.dumps(result))
    return 0


def exported(run_dir: Path, log: Path, env: dict) -> Path:
    """RUN/ct2: the run's last checkpoint as a CTranslate2 model, exported (not timed) when missing;
    a RaceError naming ``log`` when the export fails."""
    ct2_dir = run_dir / "ct2"
    if not (ct2_dir / "model.bin").is_file():
        run([sys.executable, "-m", "attnmt", "export", "--format", "ctranslate2", "--model", str(run_dir),
             "--out", str(ct2_dir), "--checkpoint", "last", "--force"], log, env)
    return ct2_dir


def summarise(times: dict, quality: dict, variants: dict, batches: list[int]) -> dict:
    """Each engine at its own best batch size (least mean time): CTranslate2's, and per variant its
    own with the ratio of CTranslate2's best mean to it and per round (the two best sizes' times in
    that round); ``by_batch``: every size's means and the ratio at that size."""
    mean = {key: statistics.mean(t) for key, t in times.items()}
    best = {e: min(batches, key=lambda b: mean[e, b]) for e in ("ctranslate2", *variants)}
    b_ct2 = best["ctranslate2"]
    ct2_times = times["ctranslate2", b_ct2]
    result = {"batches": batches,
              "ctranslate2": {"batch": b_ct2, "mean_s": round(mean["ctranslate2", b_ct2], 2),
                              "times": [round(t, 2) for t in ct2_times], **quality["ctranslate2", b_ct2]},
              "attnmt": {}, "by_batch": {}}
    for name, flags in variants.items():
        b = best[name]
        mine = times[name, b]
        result["attnmt"][name] = {
            "flags": flags, "batch": b, "mean_s": round(mean[name, b], 2), "times": [round(t, 2) for t in mine],
            "vs_ct2": round(mean["ctranslate2", b_ct2] / mean[name, b], 3),
            "vs_ct2_rounds": [round(c / m, 3) for c, m in zip(ct2_times, mine)], **quality[name, b]}
    for b in batches:
        result["by_batch"][str(b)] = {"ctranslate2": round(mean["ctranslate2", b], 2), **{
            name: {"mean_s": round(mean[name, b], 2), "vs_ct2": round(mean["ctranslate2", b] / mean[name, b], 3),
                   **quality[name, b]} for name in variants}}
    return result


if __name__ == "__main__":
    raise SystemExit(main())
