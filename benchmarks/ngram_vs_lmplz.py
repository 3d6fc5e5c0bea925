"""Our modified-KN estimator vs KenLM's lmplz on the same text: test perplexity, time, peak memory.

    python benchmarks/ngram_vs_lmplz.py --train TRAIN.txt [--test TEST.txt] [--order 5]
        [--lmplz /path/to/lmplz | --build-lmplz DIR | --lmplz-reference '{"cpu_s": .., ...}']
        [--memory 1G] [--lmplz-memory 2G] [--workdir DIR] [--check-in-memory]
        [--goal-cpu-ratio 1.5] [--goal-peak-mib 1536]

Each estimator runs in its own process under /usr/bin/time -v (wall, CPU and peak RSS); ours is
the ``attnmt ngram build`` CLI (streaming estimation within --memory + ARPA writing, as lmplz).
lmplz: the given binary, else ``lmplz`` on PATH, else (--build-lmplz DIR) one built from the
``kenlm`` source package when a C++ compiler, cmake and Boost are present (pip download + cmake),
else the --lmplz-reference numbers (a JSON object with wall_s, cpu_s, peak_rss_mib, e.g. from
docs/results/ngram.md), else ours only. --check-in-memory also builds the model with the in-memory
estimator (``NgramLM.estimate_text``) and checks that both ARPA files are byte-identical.
Perplexities: ours with our scorer, ours and lmplz's ARPA with the ``kenlm`` module (KenLM query
semantics) when installed. Prints one JSON line and a one-line summary (with the goals, if given).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


def timed(cmd: list[str], stdin=None, stdout=None, env=None) -> dict:
    """Run under /usr/bin/time -v; wall seconds, CPU seconds, peak RSS in MiB."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    err = proc.stderr

    def field(name):
        return re.search(rf"{name}: (.*)", err).group(1).strip()

    wall = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)")
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    cpu = float(field(r"User time \(seconds\)")) + float(field(r"System time \(seconds\)"))
    est = re.search(r"in ([0-9.]+)s; n-grams", err)
    return {"wall_s": round(secs, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(int(field(r"Maximum resident set size \(kbytes\)")) / 1024, 1),
            **({"estimate_only_s": float(est.group(1))} if est else {})}


def build_lmplz(directory: Path) -> Path | None:
    """lmplz built from the kenlm source package in ``directory`` (reused when already there)."""
    binary = directory / "build" / "bin" / "lmplz"
    if binary.exists():
        return binary
    if not (shutil.which("c++") and shutil.which("cmake")):
        print("no C++ compiler or cmake: lmplz not built", file=sys.stderr)
        return None
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "--no-build-isolation", "kenlm", "-d", str(directory)], check=True)
    archive = next(directory.glob("kenlm-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(directory, filter="data")
    source = next(p for p in directory.iterdir() if p.is_dir() and p.name.startswith("kenlm-"))
    build = directory / "build"
    build.mkdir(exist_ok=True)
    for cmd in (["cmake", "-DCMAKE_BUILD_TYPE=Release", str(source)],
                ["make", "-j2", "lmplz"]):
        if subprocess.run(cmd, cwd=build, check=False).returncode != 0:
            print("building lmplz failed (Boost and zlib headers needed)", file=sys.stderr)
            return None
    return binary if binary.exists() else None


def kenlm_ppl(arpa: Path, test: Path) -> float | None:
    try:
        import kenlm
    except ImportError:
        return None
    model = kenlm.Model(str(arpa))
    total, n = 0.0, 0
    with open(test, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            total += model.score(line)
            n += len(line.split()) + 1
    return 10 ** (-total / n)


def compare_arpas(ours_path: Path, theirs_path: Path) -> dict:
    """Same n-grams in both files? Largest |difference| of log10 probabilities and backoffs."""
    import numpy as np

    from attnmt.ngram import load_ngram
    from attnmt.ngram.arpa import ngram_words

    a, b = load_ngram(ours_path), load_ngram(theirs_path)
    to_b = {w: i for i, w in enumerate(b.vocab)}
    remap = np.array([to_b.get(w, -1) for w in a.vocab])
    out = {"same_ngrams": True, "max_abs_dlogp": 0.0, "max_abs_dlogb": 0.0}
    for k in range(1, a.order + 1):
        ta, tb = a.tables[k - 1], b.tables[k - 1]
        wa = remap[ngram_words(a.tables, k, np.arange(len(ta.word)))]
        wb = ngram_words(b.tables, k, np.arange(len(tb.word)))
        if wa.shape != wb.shape:
            out["same_ngrams"] = False
            continue
        ia, ib = np.lexsort(wa.T[::-1]), np.lexsort(wb.T[::-1])
        if not np.array_equal(wa[ia], wb[ib]):
            out["same_ngrams"] = False
            continue
        pa, pb = ta.logp[ia], tb.logp[ib]
        fin = np.isfinite(pa) & np.isfinite(pb)
        out["max_abs_dlogp"] = max(out["max_abs_dlogp"], float(np.abs(pa - pb)[fin].max()))
        out["max_abs_dlogb"] = max(out["max_abs_dlogb"],
                                   float(np.abs(ta.logb[ia] - tb.logb[ib]).max()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test")
    ap.add_argument("--lmplz", help="path to KenLM's lmplz binary (default: lmplz on PATH)")
    ap.add_argument("--build-lmplz", metavar="DIR", type=Path,
                    help="without lmplz, build it from the kenlm source package in DIR")
    ap.add_argument("--lmplz-reference", metavar="JSON",
                    help="without lmplz, compare with these numbers: wall_s, cpu_s, peak_rss_mib")
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--memory", default="1G", help="our --memory budget")
    ap.add_argument("--lmplz-memory", default="2G", help="lmplz -S (sort memory)")
    ap.add_argument("--binary-only", action="store_true",
                    help="ours writes only the binary model (no ARPA; no lmplz, no comparisons)")
    ap.add_argument("--check-in-memory", action="store_true",
                    help="also run the in-memory estimator and compare the ARPA files byte by byte")
    ap.add_argument("--goal-cpu-ratio", type=float, help="goal: our CPU time <= this x lmplz's")
    ap.add_argument("--goal-peak-mib", type=float, help="goal: our peak RSS <= this many MiB")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--name", default=None)
    ap.add_argument("--compare-arpa", action="store_true",
                    help="also compare the two ARPA files n-gram by n-gram (slow on big files)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ngram_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    name = args.name or Path(args.train).stem
    ours_arpa, ken_arpa = work / f"{name}.ours.arpa", work / f"{name}.lmplz.arpa"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    ours_bin = work / f"{name}.ours.ngram"
    # With --test, the binary is also written (cheap) so the perplexity step loads fast.
    outputs = ["--binary", str(ours_bin)] if args.binary_only else [
        "--arpa", str(ours_arpa), *(["--binary", str(ours_bin)] if args.test else [])]
    ours = timed([sys.executable, "-m", "attnmt", "ngram", "build", "--order", str(args.order),
                  "--input", args.train, *outputs, "--memory", args.memory, "--temp", str(work),
                  "--no-progress"], env=env)
    lmplz_path = args.lmplz or shutil.which("lmplz")
    if not lmplz_path and args.build_lmplz and not args.binary_only:
        lmplz_path = build_lmplz(args.build_lmplz)
    lmplz = None
    if lmplz_path and not args.binary_only:
        with open(args.train, "rb") as fin, open(ken_arpa, "w") as fout:
            lmplz = timed([str(lmplz_path), "-o", str(args.order), "-S", args.lmplz_memory, "-T",
                           str(work), "--discount_fallback"], stdin=fin, stdout=fout)
    elif args.lmplz_reference:
        lmplz = {**json.loads(args.lmplz_reference), "reference": True}
    result = {"name": name, "order": args.order, "memory": args.memory, "ours": ours,
              "lmplz": lmplz}
    if args.check_in_memory:
        memory_arpa = work / f"{name}.memory.arpa"
        code = ("import sys; from attnmt.ngram import NgramLM; "
                f"NgramLM.estimate_text(sys.argv[1], order={args.order}).to_arpa(sys.argv[2])")
        result["in_memory"] = timed([sys.executable, "-c", code, args.train, str(memory_arpa)],
                                    env=env)
        result["arpa_identical_to_in_memory"] = filecmp.cmp(ours_arpa, memory_arpa, shallow=False)
        memory_arpa.unlink()
    if args.test:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from attnmt.ngram import load_ngram
        from attnmt.ngram.corpus import read_lines

        lm = load_ngram(ours_bin)
        res = lm.perplexity(line for _, line in read_lines(args.test))
        result["ppl_ours"] = res["ppl"]
        result["oov"] = res["oov"]
        result["test_words"] = res["words"]
        result["ppl_ours_in_kenlm"] = kenlm_ppl(ours_arpa, args.test)
        result["ppl_lmplz_in_kenlm"] = kenlm_ppl(ken_arpa, args.test) if ken_arpa.exists() \
            else None
        if result["ppl_lmplz_in_kenlm"]:
            result["ppl_rel_diff"] = result["ppl_ours"] / result["ppl_lmplz_in_kenlm"] - 1
    if args.compare_arpa and ken_arpa.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        result["arpa_compare"] = compare_arpas(ours_arpa, ken_arpa)
    goals = {}
    if args.goal_cpu_ratio and lmplz:
        goals["cpu_ratio"] = round(ours["cpu_s"] / lmplz["cpu_s"], 3)
        goals["cpu_ok"] = goals["cpu_ratio"] <= args.goal_cpu_ratio
    if args.goal_peak_mib:
        goals["peak_ok"] = ours["peak_rss_mib"] <= args.goal_peak_mib
    result["goals"] = goals
    print(json.dumps(result))
    summary = (f"{name}: ours {ours['wall_s']}s wall / {ours['cpu_s']}s CPU / "
               f"{ours['peak_rss_mib']} MiB")
    if lmplz:
        summary += (f" vs lmplz{' (reference)' if lmplz.get('reference') else ''} "
                    f"{lmplz['wall_s']}s / {lmplz['cpu_s']}s / {lmplz['peak_rss_mib']} MiB")
    if "ppl_rel_diff" in result:
        summary += (f"; test ppl ours {result['ppl_ours']:.3f} vs lmplz "
                    f"{result['ppl_lmplz_in_kenlm']:.3f} ({100 * result['ppl_rel_diff']:+.4f}%)")
    if args.check_in_memory:
        summary += f"; ARPA identical to in-memory: {result['arpa_identical_to_in_memory']}"
    if goals:
        summary += "; goals " + " ".join(f"{k}={v}" for k, v in goals.items())
    print(summary)


if __name__ == "__main__":
    main()
