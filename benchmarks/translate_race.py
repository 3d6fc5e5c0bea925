"""Translation only, repeated: the race's two translators on the race's own checkpoints.

Single timings of either translation command vary by ±10 % on the 2-core machine (docs/results/
race.md), so one race's translation ratio is one sample. This script re-times the translation
step of a finished ``benchmarks/peer_race.py --out OUT`` run, alternating the commands round by
round on the same checkpoints: OpenNMT-py's ``onmt_translate`` exactly as the race runs it (its
last checkpoint, beam 5, batches of 64 sentences, 2 threads), ``attnmt translate`` as the race
runs it, and ``attnmt translate --int8`` (the output layer as an 8-bit product); with ``--bf16``
also ``attnmt translate --bf16`` and ``--bf16 --int8`` (CPUs with bfloat16 units). Each command is
timed whole from outside and scored with the race's sacreBLEU call.

    python benchmarks/translate_race.py --out OUT --sizes 256,512 --rounds 2 [--threads 2]
        [--venv OUT/onmt-venv] [--bf16]

Prints one JSON line per command run, then one JSON object with every size's median times,
ratios (OpenNMT-py's time ÷ attnmt's) and BLEU, and a one-line summary per size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_race import (RaceError, attnmt_env, attnmt_translate, decode_pieces, opennmt_env,  # noqa: E402
                       opennmt_translate, run, score)


def commands(out: Path, size: int, bin_dir: Path, threads: int, bf16: bool = False) -> dict[str, tuple[list[str], dict, Path]]:
    """name -> (command, environment, file of detokenised output or of pieces for OpenNMT-py)."""
    data, onmt, ours = out / "data", out / str(size) / "opennmt", out / str(size) / "attnmt"
    ckpts = sorted(onmt.glob("model_step_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not ckpts or not (ours / "checkpoints").is_dir():
        raise RaceError(f"no finished race at size {size} under {out} (run benchmarks/peer_race.py first)")
    env = attnmt_env(threads)
    cmds = {
        "opennmt": (opennmt_translate(bin_dir, ckpts[-1], data, onmt / "retime.hyp.sp"), opennmt_env(threads),
                    onmt / "retime.hyp.sp"),
        "attnmt": (attnmt_translate(ours, data, ours / "retime.hyp.es"), env, ours / "retime.hyp.es"),
        "attnmt --int8": (attnmt_translate(ours, data, ours / "retime.int8.hyp.es", "--int8"), env,
                          ours / "retime.int8.hyp.es"),
    }
    if bf16:
        for name, flags in (("attnmt --bf16", ["--bf16"]), ("attnmt --bf16 --int8", ["--bf16", "--int8"])):
            hyp = ours / f"retime.{'.'.join(f[2:] for f in flags)}.hyp.es"
            cmds[name] = (attnmt_translate(ours, data, hyp, *flags), env, hyp)
    return cmds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the folder of a finished peer_race.py run")
    ap.add_argument("--sizes", default="256,512")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="also attnmt translate --bf16 (CPUs with bfloat16 units)")
    ap.add_argument("--venv", help="OpenNMT-py's virtual environment (default OUT/onmt-venv)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    bin_dir = Path(args.venv or out / "onmt-venv") / "bin"
    summary = []
    try:
        if not (out / "data" / "test.es").is_file():
            raise RaceError(f"no {out / 'data' / 'test.es'}: --out must be a finished peer_race.py folder")
        refs = (out / "data" / "test.es").read_text(encoding="utf-8").splitlines()
        if not (bin_dir / "onmt_translate").exists():
            raise RaceError(f"no onmt_translate in {bin_dir} (peer_race.py installs it; or pass --venv)")
        for size in (int(s) for s in args.sizes.split(",")):
            cmds = commands(out, size, bin_dir, args.threads, args.bf16)
            times: dict[str, list[float]] = {name: [] for name in cmds}
            bleu: dict[str, float] = {}
            for rnd in range(1, args.rounds + 1):
                for name, (cmd, env, hyp) in cmds.items():
                    took = run(cmd, hyp.with_suffix(".log"), env)
                    hyps = (decode_pieces(hyp, out / "data" / "spm.es.model") if name == "opennmt"
                            else hyp.read_text(encoding="utf-8").splitlines())
                    bleu[name] = score(hyps, refs)["bleu"]
                    times[name].append(round(took, 1))
                    print(json.dumps({"size": size, "round": rnd, "command": name, "seconds": round(took, 1),
                                      "bleu": bleu[name]}), flush=True)
            median = {name: statistics.median(t) for name, t in times.items()}
            row = {"size": size, "seconds": times, "median_s": median, "bleu": bleu,
                   "ratio": {name: round(median["opennmt"] / median[name], 3) for name in cmds if name != "opennmt"}}
            summary.append(row)
    except RaceError as err:
        print(f"translate_race: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "rows": summary}))
    for row in summary:
        print(f"size {row['size']}: OpenNMT-py {row['median_s']['opennmt']} s, attnmt {row['median_s']['attnmt']} s "
              f"({row['ratio']['attnmt']}x), --int8 {row['median_s']['attnmt --int8']} s "
              f"({row['ratio']['attnmt --int8']}x); BLEU {row['bleu']['opennmt']} / {row['bleu']['attnmt']} / "
              f"{row['bleu']['attnmt --int8']}"
              + "".join(f"; {n} {row['median_s'][n]} s ({row['ratio'][n]}x, BLEU {row['bleu'][n]})"
                        for n in row["ratio"] if "bf16" in n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
