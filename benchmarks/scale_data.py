"""The data path at the papers' scale: attnmt and OpenNMT-py 3.5.1 on corpora of N pairs.

    python benchmarks/scale_data.py --pairs 1M,4.5M,36M [--out DIR] [--steps 40] [--threads 2]
        [--only attnmt|peer] [--own-tokenizers] [--ddp] [--lm-words 768M]

For each N, on the machine it runs on, one command at a time:

1. **Corpus**: the Bible's training pairs (``DATA/train.{en,es}``, ``attnmt data bible``) cycled
   to N pairs, copy k of a pair with its words rotated by k places on both sides and the copy
   number inserted (so the corpus is not N/28 k copies of the same lines), in ``OUT/corpus-N``;
   dev: the Bible's dev set. One sentencepiece unigram model of 8,000 pieces per language, trained
   on the Bible's train side with attnmt's special ids: both sides use it (given models).
2. **attnmt**: ``attnmt data prepare --train corpus/train --dev corpus/dev --src-spm --tgt-spm
   --max-len 100`` (``--own-tokenizers``: learning its own on the default 2 M-sentence sample
   instead), then ``attnmt train configs/race-transformer.yaml --set data.prepared=...`` for
   ``--steps`` updates (the race Transformer, d 256, ~2,000-token batches, 2 threads).
3. **OpenNMT-py** (its own venv, as benchmarks/peer_race.py installs it): ``onmt_build_vocab
   -n_sample 100000`` and ``onmt_train`` of the same model and recipe (race_peers.peer_config)
   reading the raw text through its on-the-fly ``sentencepiece`` and ``filtertoolong`` transforms
   with the same models, for the same updates.
4. **Measures** per command: wall time; peak memory = the largest sum of PSS over the command's
   process tree, sampled each second (pages a forked or spawned worker shares count once);
   for training, the time from the command's start to its first update (attnmt: log.jsonl's step-1
   record; OpenNMT-py: its "Step 1/" report) and the steady target tokens/s from the 10th update
   on (each side's own log).

``--ddp``: at the smallest N also ``torchrun --nproc-per-node 2`` of attnmt (one thread each):
total PSS against the single process's. ``--lm-words``: an LM text of that many words (the four
domain texts of ``--domains``, cycled with the same per-copy change), prepared (``--task lm``),
an LM trained for ``--steps`` updates, and ``attnmt ngram build --order 5 --prepared --memory
10G``: each with its peak memory.

Prints one JSON line per measured command and a summary table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from race_peers import RaceError, build_vocab, install, peer_config  # noqa: E402


def count(text: str) -> int:
    m = re.fullmatch(r"([0-9.]+)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"bad count {text!r} (e.g. 1M, 4.5M, 36M)")
    return int(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)])


# -- memory of a process group -------------------------------------------------------------------
def tree_pids(root: int) -> set[int]:
    """Process ``root`` and all its descendants (torchrun starts its ranks in sessions of their
    own, so a process group would miss them)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, pp in parent.items() if pp in tree and pid not in tree}
        tree |= more
        grew = bool(more)
    return tree


def tree_pss(root: int) -> int:
    """Bytes of PSS summed over process ``root`` and all its descendants."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


def measured(cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None,
             timeout: float | None = None) -> dict:
    """Run ``cmd`` in its own process group; its wall time, exit code and the peak PSS of its
    process tree."""
    peak = [0]
    start = time.time()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_pss(proc.pid))
                done.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        done.set()
        sampler.join()
    return {"start": start, "seconds": round(time.time() - start, 1), "rc": code,
            "peak_gb": round(peak[0] / 2**30, 3)}


def must(result: dict, what: str, log: Path) -> dict:
    if result["rc"] != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise RaceError(f"{what} failed (exit {result['rc']}; see {log}): {tail[0][:300]}")
    return result


# -- corpora --------------------------------------------------------------------------------------
def changed(words: list[str], k: int) -> str:
    """Copy k of a sentence: rotated by k places, the copy number inserted."""
    if k == 0 or not words:
        return " ".join(words)
    r = k % len(words)
    out = words[r:] + words[:r]
    out.insert((7 * k) % (len(out) + 1), str(k))
    return " ".join(out)


def make_corpus(data: Path, n: int, out: Path) -> Path:
    """``out/train.{en,es}`` of ``n`` pairs cycled from ``data/train`` and the Bible's dev set."""
    ready = out / "READY"
    if ready.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    src = [x.split() for x in (data / "train.en").read_text(encoding="utf-8").splitlines()]
    tgt = [x.split() for x in (data / "train.es").read_text(encoding="utf-8").splitlines()]
    with open(out / "train.en", "w", encoding="utf-8") as fe, open(out / "train.es", "w", encoding="utf-8") as fs:
        for start in range(0, n, len(src)):
            k = start // len(src)
            m = min(len(src), n - start)
            fe.write("".join(changed(s, k) + "\n" for s in src[:m]))
            fs.write("".join(changed(t, k) + "\n" for t in tgt[:m]))
    for lang in ("en", "es"):
        shutil.copyfile(data / f"dev.{lang}", out / f"dev.{lang}")
    ready.write_text("ok\n")
    return out


def make_lm_text(domains: Path, words: int, out: Path) -> Path:
    """An LM text of ``words`` words cycled from the domain texts, one sentence a line."""
    path = out / "lm.txt"
    if (out / "READY").exists():
        return path
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for f in sorted(domains.glob("*_en.txt")):
        lines += [x.split() for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
    written, k = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < words:
            block = []
            for w in lines:
                block.append(changed(w, k))
                written += len(w) + (k > 0)
                if written >= words:
                    break
            f.write("".join(x + "\n" for x in block))
            k += 1
    (out / "READY").write_text(f"{written}\n")
    return path


def spm_models(data: Path, out: Path) -> dict[str, Path]:
    import sentencepiece as spm

    models = {}
    for lang in ("en", "es"):
        prefix = out / f"spm.{lang}"
        if not Path(f"{prefix}.model").exists():
            spm.SentencePieceTrainer.train(
                input=str(data / f"train.{lang}"), model_prefix=str(prefix), vocab_size=8000,
                model_type="unigram", character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                minloglevel=2, num_threads=2)
        models[lang] = Path(f"{prefix}.model")
    return models


# -- the sides --------------------------------------------------------------------------------------
def attnmt_env(threads: int) -> dict:
    path = os.pathsep.join([str(ROOT)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": path}


def attnmt_progress(run: Path) -> list[dict]:
    log = run / "log.jsonl"
    if not log.exists():
        return []
    return [r for r in map(json.loads, log.read_text(encoding="utf-8").splitlines()) if r.get("event") == "train"]


def steady_rate(records: list[tuple[float, int]]) -> float | None:
    """Target tokens/s from the 10th update on: (time, cumulative tokens) records."""
    late = [r for r in records[9:]]
    if len(late) < 2:
        return None
    return round((late[-1][1] - late[0][1]) / max(late[-1][0] - late[0][0], 1e-9), 1)


def attnmt_side(corpus: Path, models: dict[str, Path], out: Path, steps: int, threads: int, own: bool,
                ddp: bool) -> list[dict]:
    env = attnmt_env(threads)
    prep = out / ("prep-own" if own else "prep")
    rows = []
    if not (prep / "manifest.json").exists():
        cmd = [sys.executable, "-m", "attnmt", "data", "prepare", "--train", str(corpus / "train"),
               "--dev", str(corpus / "dev"), "--max-len", "100", "--out", str(prep), "--force"]
        if not own:
            cmd += ["--src-spm", str(models["en"]), "--tgt-spm", str(models["es"])]
        log = out / f"prepare{'-own' if own else ''}.log"
        r = must(measured(cmd, log, env), "attnmt data prepare", log)
        manifest = json.loads((prep / "manifest.json").read_text())
        pairs = manifest["splits"]["train"]["read"]
        rows.append({"side": "attnmt", "what": "prepare" + ("-own-tokenizers" if own else ""),
                     **{k: r[k] for k in ("seconds", "peak_gb")}, "pairs_per_s": round(pairs / r["seconds"]),
                     "kept": manifest["splits"]["train"]["pairs"]})
    for world in ([1, 2] if ddp else [1]):
        run = out / f"run-attnmt-w{world}"
        shutil.rmtree(run, ignore_errors=True)
        sets = [f"data.prepared={prep}", f"train.max_steps={steps}", "train.log_every=1",
                f"train.threads={threads // world}", "train.epochs=1000"]
        launcher = [] if world == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
        cmd = [sys.executable, *launcher, "-m", "attnmt", "train", str(ROOT / "configs/race-transformer.yaml"),
               "--out", str(run)]
        for s in sets:
            cmd += ["--set", s]
        log = out / f"train-attnmt-w{world}.log"
        r = must(measured(cmd, log, {**env, "OMP_NUM_THREADS": str(max(threads // world, 1))}), "attnmt train", log)
        records = attnmt_progress(run)
        first = records[0]["time"] - r["start"] if records else None
        rows.append({"side": "attnmt", "what": f"train{'' if world == 1 else f'-torchrun{world}'}",
                     "seconds": r["seconds"], "peak_gb": r["peak_gb"],
                     "first_update_s": round(first, 1) if first is not None else None,
                     "tok_s": steady_rate([(x["time"], x["tokens"]) for x in records]), "steps": len(records)})
    return rows


def peer_side(corpus: Path, models: dict[str, Path], out: Path, steps: int, threads: int, venv: Path) -> list[dict]:
    import yaml

    from attnmt.config import load_config

    bin_dir = install("opennmt", venv)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    env.pop("PYTHONPATH", None)
    run = out / "run-onmt"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    cfg = load_config(ROOT / "configs/race-transformer.yaml", [f"train.threads={threads}"])
    conf = peer_config("opennmt", "transformer", cfg, corpus, run, save_every=10**6)
    transforms = ["sentencepiece", "filtertoolong"]
    conf["data"] = {"corpus_1": {"path_src": str(corpus / "train.en"), "path_tgt": str(corpus / "train.es"),
                                 "transforms": transforms},
                    "valid": {"path_src": str(corpus / "dev.en"), "path_tgt": str(corpus / "dev.es"),
                              "transforms": transforms}}
    conf.update(src_subword_model=str(models["en"]), tgt_subword_model=str(models["es"]),
                train_steps=steps, report_every=1, valid_steps=10**6)
    config = run / "config.yaml"
    config.write_text(yaml.safe_dump(conf), encoding="utf-8")
    rows = []
    log = out / "vocab-onmt.log"
    vocab_cmd = build_vocab("opennmt", bin_dir, config)
    vocab_cmd[vocab_cmd.index("-n_sample") + 1] = "100000"
    r = must(measured(vocab_cmd, log, env), "onmt_build_vocab", log)
    rows.append({"side": "opennmt", "what": "build_vocab (100k sample)", "seconds": r["seconds"], "peak_gb": r["peak_gb"]})
    log = out / "train-onmt.log"
    r = must(measured([str(bin_dir / "onmt_train"), "-config", str(config)], log, env), "onmt_train", log)
    reports = onmt_reports(log)
    first = reports[0][0] - r["start"] if reports else None
    rows.append({"side": "opennmt", "what": "train", "seconds": r["seconds"], "peak_gb": r["peak_gb"],
                 "first_update_s": round(first, 1) if first is not None else None,
                 "tok_s": steady_rate(reports), "steps": len(reports)})
    return rows


_REPORT = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) INFO\] Step\s+(\d+)/.*?bsz:\s*(\d+)/\s*(\d+)/")


def onmt_reports(log: Path) -> list[tuple[float, int]]:
    """(time, cumulative target tokens) of each report (report_every 1: one per update)."""
    out, tokens, prev = [], 0, 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _REPORT.match(line)
        if m:
            stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            step = int(m.group(3))
            tokens += int(m.group(5)) * (step - prev)
            prev = step
            out.append((stamp, tokens))
    return out


def lm_side(domains: Path, words: int, out: Path, steps: int, threads: int,
            parts: set[str]) -> list[dict]:
    env = attnmt_env(threads)
    text = make_lm_text(domains, words, out / f"lm-{words}")
    prep = out / f"lm-{words}" / "prep"
    rows = []
    if not (prep / "manifest.json").exists():
        log = out / "lm-prepare.log"
        r = must(measured([sys.executable, "-m", "attnmt", "data", "prepare", "--task", "lm", "--train", str(text),
                           "--tokenizer", "unigram", "--vocab-size", "16000", "--out", str(prep), "--force"], log, env),
                 "attnmt data prepare (lm)", log)
        rows.append({"side": "attnmt", "what": "lm prepare", "seconds": r["seconds"], "peak_gb": r["peak_gb"]})
    if "train" in parts:
        rows += lm_train(prep, out, steps, env)
    if "ngram" in parts:
        rows += lm_ngram(prep, out / f"lm-{words}", out, env)
    return rows


def lm_train(prep: Path, out: Path, steps: int, env: dict) -> list[dict]:
    run = out / "run-lm"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [sys.executable, "-m", "attnmt", "train", str(ROOT / "configs/lm-lstm.yaml"), "--out", str(run)]
    for s in (f"data.prepared={prep}", f"train.max_steps={steps}", "train.log_every=1",
              f"train.threads={env['OMP_NUM_THREADS']}",
              "train.epochs=1000", "data.dev="):
        cmd += ["--set", s]
    log = out / "lm-train.log"
    r = must(measured(cmd, log, env), "attnmt train (lm)", log)
    records = attnmt_progress(run)
    return [{"side": "attnmt", "what": "lm train", "seconds": r["seconds"], "peak_gb": r["peak_gb"],
             "first_update_s": round(records[0]["time"] - r["start"], 1) if records else None}]


def lm_ngram(prep: Path, work: Path, out: Path, env: dict) -> list[dict]:
    log = out / "lm-ngram.log"
    binary = work / "5gram.bin"
    r = must(measured([sys.executable, "-m", "attnmt", "ngram", "build", "--order", "5", "--prepared", str(prep),
                       "--binary", str(binary), "--memory", "10G", "--temp", str(out)], log, env),
             "attnmt ngram build", log)
    return [{"side": "attnmt", "what": "5-gram from the prepared ids", "seconds": r["seconds"],
             "peak_gb": r["peak_gb"]}]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default="1M", help="comma-separated corpus sizes: 1M,4.5M,36M")
    p.add_argument("--data", default=str(ROOT / "data/bible"), help="the Bible corpus (attnmt data bible)")
    p.add_argument("--domains", default=str(ROOT.parent / "shared/data/domains"),
                   help="folder of *_en.txt domain texts (--lm-words)")
    p.add_argument("--out", default=str(ROOT / "exp/scale"), help="work folder (corpora, runs, logs)")
    p.add_argument("--steps", type=int, default=40, help="training updates per side")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", choices=["attnmt", "peer"], help="one side only")
    p.add_argument("--own-tokenizers", action="store_true",
                   help="attnmt also prepares learning its own tokenizers on the sample")
    p.add_argument("--ddp", action="store_true", help="also torchrun with 2 ranks (smallest N)")
    p.add_argument("--lm-words", help="also an LM text of this many words (e.g. 768M)")
    p.add_argument("--lm-parts", default="train,ngram",
                   help="what the LM side runs after preparing: train, ngram or both (comma-separated)")
    p.add_argument("--venv", help="OpenNMT-py's venv (default OUT/onmt-venv)")
    p.add_argument("--keep", action="store_true", help="keep each N's corpus and preparation")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data)
    rows = []
    try:
        models = spm_models(data, out)
        sizes = [count(x) for x in args.pairs.split(",") if x.strip()]
        for i, n in enumerate(sizes):
            work = out / f"n{n}"
            corpus = make_corpus(data, n, work / "corpus")
            found = []
            if args.only != "peer":
                found += attnmt_side(corpus, models, work, args.steps, args.threads, False, args.ddp and i == 0)
                if args.own_tokenizers:
                    found += attnmt_side(corpus, models, work, args.steps, args.threads, True, False)[:1]
            if args.only != "attnmt":
                found += peer_side(corpus, models, work, args.steps, args.threads,
                                   Path(args.venv) if args.venv else out / "onmt-venv")
            for row in found:
                row = {"pairs": n, **row}
                print(json.dumps(row), flush=True)
                rows.append(row)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        if args.lm_words:
            for row in lm_side(Path(args.domains), count(args.lm_words), out, args.steps, args.threads,
                               set(args.lm_parts.split(","))):
                row = {"words": count(args.lm_words), **row}
                print(json.dumps(row), flush=True)
                rows.append(row)
    except RaceError as err:
        print(f"scale_data: error: {err}", file=sys.stderr)
        return 2
    print("\npairs      side     what                          s       peak GB  first update s  tok/s")
    for r in rows:
        print(f"{r.get('pairs', r.get('words', '')):>10} {r['side']:<8} {r['what']:<28} {r['seconds']:>7} "
              f"{r['peak_gb']:>8} {str(r.get('first_update_s', '')):>14} {str(r.get('tok_s', '')):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
