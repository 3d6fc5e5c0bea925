"""The race a user runs: attnmt against OpenNMT-py 3.5.1, same corpus, same model, same wall clock.

    python benchmarks/peer_race.py --budget 900 --sizes 256,512 [--threads 2] [--out DIR]
        [--data data/bible] [--only attnmt|opennmt] [--set section.key=value ...]

What it does, on the machine it runs on:

1. **Data, identical for both sides.** ``DATA/{train,dev,test}.{en,es}`` (``attnmt data bible --out
   data/bible``), stripped, go to ``OUT/data``. One sentencepiece unigram model of 8,000 pieces per
   language is trained on the train side (character coverage 1.0, attnmt's special ids), and every
   split is encoded with it into pieces for OpenNMT-py. attnmt reads the same model
   (``data.src_spm`` / ``data.tgt_spm``), so both train on the same pieces.
2. **OpenNMT-py 3.5.1** is installed into its own virtual environment (``OUT/onmt-venv``) on the
   torch 2.13 CPU wheel: its metadata asks for torch<2.3, so it goes in with ``--no-deps`` plus
   the packages its trainer and translator import; its tools run with
   ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch ≥ 2.6 refuses its checkpoints otherwise).
3. **The model**, both sides: 2-layer LSTM encoder and decoder, hidden SIZE, embeddings 256, Luong
   ``general`` attention with input feeding, dropout 0.2, batches of 64 sentences, Adam, pairs up
   to 100 pieces, source in order, uniform initialisation in ±0.1. OpenNMT-py runs its reference
   recipe (``OPENNMT_CONFIG`` below: Adam 0.001 constant, gradient norm 5); attnmt runs
   ``configs/race-lstm.yaml`` with ``model.hidden=SIZE``.
4. **Training**, one side after the other, each for BUDGET seconds of wall clock for the whole
   command (start-up, vocabulary, data loading and checkpoints included): OpenNMT-py under
   ``timeout BUDGET``, saving a checkpoint every 25 updates (its last one before the kill is its
   result: on average it loses half of 25 updates); attnmt with ``train.max_time = BUDGET - 10`` seconds of
   update time (so a schedule that decays over the budget, ``train.schedule: linear``, reaches its
   end), after which it writes its final checkpoint and exits, under ``timeout -s TERM BUDGET`` as a
   safety net (the handler finishes the update in progress and writes a checkpoint). Neither validates inside the budget unless its config says so (OpenNMT-py's
   reference config validates every 1,000 updates).
5. **Measures.** ``steps``: updates in the evaluated state. ``tgt_tok_s``: target pieces per second
   (``</s>`` included, padding excluded) between the first and the last progress report of the run,
   from each side's own log (OpenNMT-py: ``bsz`` target pieces × 25 updates per report; attnmt: the
   ``tokens`` counter of log.jsonl), so start-up is not counted; ``s_per_step`` likewise.
   ``budget_tok_s``: pieces trained in the evaluated state / BUDGET. ``dev_ppl``: per target piece
   (``</s>`` included) of the dev set under the evaluated state (OpenNMT-py: its translator's GOLD
   score with ``-tgt``, converted from per sentence to per piece; attnmt: ``attnmt score --model``).
   ``translate_s``: the whole translation command on the test set, beam 5, batches of 64 sentences,
   timed from outside; ``sent_s`` = test sentences / translate_s. attnmt's side is timed a second
   time with ``--int8`` (its output layer as an 8-bit product, an opt-in speed option):
   ``translate_int8_s``, ``bleu_int8``. ``bleu`` / ``chrf``: sacrebleu's
   defaults on the detokenised output (OpenNMT-py's pieces decoded with the sentencepiece model)
   against the raw Spanish test side, the same call for both.

The last line printed is one JSON object ``{"budget": s, "threads": n, "rows": [{"size": 512,
"attnmt": {...}, "opennmt": {...}}, ...]}``. Each side writes its files under ``OUT/SIZE/SIDE``.
Run it on an otherwise idle machine: the two sides run one after the other, never together.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONMT_VERSION = "3.5.1"
# what OpenNMT-py's onmt_train / onmt_translate import at start-up (its own requirements minus torch)
ONMT_DEPS = [
    "configargparse", "pyyaml", "sacrebleu", "six", "tensorboard", "pyonmttok<2,>=1.37", "rapidfuzz",
    "pyahocorasick", "ctranslate2<5,>=4", "spacy", "fasttext-wheel", "flask", "waitress",
    "sentencepiece",
]
STOP_MARGIN = 10  # attnmt stops itself this many seconds of update time before the budget (start-up
# and checkpoints take ~5 s), so a schedule that decays over the budget ends where it should
REPORT_EVERY = 25  # both sides: a progress record (and, for OpenNMT-py, a checkpoint) every 25 updates

# OpenNMT-py 3.5.1's reference recipe for this corpus (paths and sizes filled in per run)
OPENNMT_CONFIG = {
    "src_vocab_size": 32768, "tgt_vocab_size": 32768, "share_vocab": False, "overwrite": True,
    "src_seq_length": 100, "tgt_seq_length": 100, "model_type": "text",
    "encoder_type": "rnn", "decoder_type": "rnn", "rnn_type": "LSTM", "enc_layers": 2, "dec_layers": 2,
    "word_vec_size": 256, "global_attention": "general", "global_attention_function": "softmax",
    "input_feed": 1, "dropout": [0.2], "param_init": 0.1, "seed": 1234,
    "batch_type": "sents", "batch_size": 64, "valid_batch_size": 64, "train_steps": 100000,
    "valid_steps": 1000, "save_checkpoint_steps": REPORT_EVERY, "keep_checkpoint": 2,
    "optim": "adam", "learning_rate": 0.001, "max_grad_norm": 5, "report_every": REPORT_EVERY,
    "num_workers": 0, "gpu_ranks": [],
}


class RaceError(Exception):
    """A problem that stops the race: printed as one line, exit status 2."""


def run(cmd: list[str], log: Path, env: dict | None = None, timeout: float | None = None) -> float:
    """Run ``cmd`` with its output in ``log``; returns its wall time. Raises RaceError on failure."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise RaceError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}; see {log}): {tail[0][:200]}")
    return took


# -- data ---------------------------------------------------------------------------------------
def prepare_data(src_dir: Path, out: Path) -> Path:
    """Stripped text, one sentencepiece model per language, and piece files for OpenNMT-py."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    done = out / "READY"
    if done.exists():
        return out
    for split in ("train", "dev", "test"):
        for lang in ("en", "es"):
            path = src_dir / f"{split}.{lang}"
            if not path.is_file():
                raise RaceError(f"{path}: not found (build the corpus with: attnmt data bible --out {src_dir})")
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
            (out / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    for lang in ("en", "es"):
        spm.SentencePieceTrainer.train(
            input=str(out / f"train.{lang}"), model_prefix=str(out / f"spm.{lang}"), vocab_size=8000,
            model_type="unigram", character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
            minloglevel=2, num_threads=2,
        )
        sp = spm.SentencePieceProcessor(model_file=str(out / f"spm.{lang}.model"))
        for split in ("train", "dev", "test"):
            lines = (out / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            pieces = sp.encode(lines, out_type=str)
            (out / f"{split}.sp.{lang}").write_text("".join(" ".join(p) + "\n" for p in pieces), encoding="utf-8")
    done.write_text("ok\n")
    return out


def target_pieces(path: Path) -> int:
    """Pieces of a piece file, one </s> per line included."""
    return sum(len(line.split()) + 1 for line in path.read_text(encoding="utf-8").splitlines())


def train_flops_per_target_piece(data: Path, hidden: int, embed: int = 256, vocab: int = 8000) -> float:
    """Floating-point operations one training update spends per target piece, for the race's model
    on its training pairs (both ≤ 100 pieces): forward multiply-adds of the 2-layer encoder
    (4H·(E+H) + 4H·2H per source piece) and of the decoder per target piece (input feeding
    4H·(E+2H), 4H·2H, the `general` query H², scores and context 2·S·H, W_c 2H·H, output V·H),
    × 2 (a multiply-add is two operations) × 3 (backward ≈ twice forward). Elementwise work is
    left out, so the achieved GFLOP/s it gives is a lower bound of the matrix throughput."""
    h, e = hidden, embed
    src = (data / "train.sp.en").read_text(encoding="utf-8").splitlines()
    tgt = (data / "train.sp.es").read_text(encoding="utf-8").splitlines()
    macs = pieces = 0
    for x, y in zip(src, tgt):
        s, t = len(x.split()) + 1, len(y.split()) + 1
        if s > 101 or t > 101:
            continue
        macs += s * (4 * h * (e + h) + 4 * h * 2 * h)
        macs += t * (4 * h * (e + 2 * h) + 4 * h * 2 * h + h * h + 2 * s * h + 2 * h * h + vocab * h)
        pieces += t
    return 6.0 * macs / max(pieces, 1)


def score(hyps: list[str], refs: list[str]) -> dict:
    import sacrebleu

    if len(hyps) != len(refs):
        raise RaceError(f"{len(hyps)} translations for {len(refs)} references")
    return {
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
    }


def rates(records: list[tuple[float, int, int]], budget: float, steps: int, tokens: int) -> dict:
    """records: (time, step, cumulative target pieces) of each progress report."""
    if len(records) < 2:
        raise RaceError("fewer than two progress reports inside the budget: raise --budget")
    (t0, s0, k0), (t1, s1, k1) = records[0], records[-1]
    return {
        "steps": steps,
        "s_per_step": round((t1 - t0) / max(s1 - s0, 1), 3),
        "tgt_tok_s": round((k1 - k0) / max(t1 - t0, 1e-9), 1),
        "budget_tok_s": round(tokens / budget, 1),
        "tgt_tokens": tokens,
    }


# -- OpenNMT-py ---------------------------------------------------------------------------------
def install_opennmt(venv: Path) -> Path:
    bin_dir = venv / "bin"
    if (bin_dir / "onmt_train").exists() and (venv / "READY").exists():
        return bin_dir
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run(pip + ["torch==2.13.0"], check=True, capture_output=True)
        subprocess.run(pip + ["--no-deps", f"opennmt-py=={ONMT_VERSION}"], check=True, capture_output=True)
        subprocess.run(pip + ONMT_DEPS, check=True, capture_output=True)
    except subprocess.CalledProcessError as err:
        last = (err.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RaceError(f"cannot install OpenNMT-py {ONMT_VERSION} into {venv}: {last[0][:200]}") from None
    (venv / "READY").write_text("ok\n")
    return bin_dir


def opennmt_env(threads: int) -> dict:
    return {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads)}


def attnmt_env(threads: int) -> dict:
    """This checkout's attnmt on ``threads`` threads."""
    path = os.pathsep.join([str(ROOT)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": path}


def opennmt_translate(bin_dir: Path, ckpt: Path, data: Path, hyp_sp: Path) -> list[str]:
    """The race's onmt_translate command (beam 5, batches of 64 sentences) of the test pieces."""
    return [str(bin_dir / "onmt_translate"), "-model", str(ckpt), "-src", str(data / "test.sp.en"),
            "-output", str(hyp_sp), "-beam_size", "5", "-batch_size", "64", "-batch_type", "sents", "-gpu", "-1"]


def attnmt_translate(run_dir: Path, data: Path, hyp: Path, *flags: str) -> list[str]:
    """The race's attnmt translation command (beam 5, batches of 64) of the test set into ``hyp``."""
    return [sys.executable, "-m", "attnmt", "translate", "--model", str(run_dir), "--input",
            str(data / "test.en"), "--output", str(hyp), "--beam", "5", "--batch-size", "64", *flags]


def decode_pieces(path: Path, spm_model: Path) -> list[str]:
    """OpenNMT-py's output pieces, one line each, as text (the sentencepiece model's decoding)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return [sp.decode(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]


_ONMT_REPORT = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) INFO\] Step (\d+)/.*?bsz:\s*(\d+)/\s*(\d+)/\s*(\d+);"
)


def opennmt_reports(log: Path) -> list[tuple[float, int, int]]:
    records, tokens, prev_step = [], 0, 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _ONMT_REPORT.match(line)
        if not m:
            continue
        stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        step, tgt_per_batch = int(m.group(3)), int(m.group(5))
        tokens += tgt_per_batch * (step - prev_step)
        prev_step = step
        records.append((stamp, step, tokens))
    return records


def race_opennmt(bin_dir: Path, data: Path, run_dir: Path, size: int, budget: float, threads: int) -> dict:
    import yaml

    run_dir.mkdir(parents=True, exist_ok=True)
    env = opennmt_env(threads)
    cfg = dict(OPENNMT_CONFIG, hidden_size=size, save_data=str(run_dir / "vocab"),
               src_vocab=str(run_dir / "vocab" / "vocab.en"), tgt_vocab=str(run_dir / "vocab" / "vocab.es"),
               save_model=str(run_dir / "model"),
               data={"corpus_1": {"path_src": str(data / "train.sp.en"), "path_tgt": str(data / "train.sp.es"),
                                  "transforms": ["filtertoolong"]},
                     "valid": {"path_src": str(data / "dev.sp.en"), "path_tgt": str(data / "dev.sp.es")}})
    config = run_dir / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    for old in run_dir.glob("model_step_*.pt"):
        old.unlink()
    run([str(bin_dir / "onmt_build_vocab"), "-config", str(config), "-n_sample", "-1"],
        run_dir / "build_vocab.log", env)
    log = run_dir / "train.log"
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(["timeout", str(budget), str(bin_dir / "onmt_train"), "-config", str(config)],
                       stdout=out, stderr=subprocess.STDOUT, env=env)
    ckpts = sorted(run_dir.glob("model_step_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not ckpts:
        raise RaceError(f"OpenNMT-py saved no checkpoint within {budget:g} s (see {log}): raise --budget")
    ckpt = ckpts[-1]
    steps = int(ckpt.stem.rsplit("_", 1)[1])
    records = opennmt_reports(log)
    tokens = next((k for _, s, k in records if s == steps), None)
    if tokens is None:
        raise RaceError(f"no progress report at step {steps} in {log}")
    result = rates(records, budget, steps, tokens)
    result["state"] = f"{ckpt.name}: the last checkpoint written before the budget ran out"
    # dev perplexity per piece from the translator's gold score (log p per sentence, </s> included)
    dev_log = run_dir / "dev_gold.log"
    run([str(bin_dir / "onmt_translate"), "-model", str(ckpt), "-src", str(data / "dev.sp.en"),
         "-tgt", str(data / "dev.sp.es"), "-output", str(run_dir / "dev.hyp.sp"), "-beam_size", "1",
         "-batch_size", "64", "-gpu", "-1"], dev_log, env)
    m = re.search(r"GOLD SCORE: (-?[\d.]+), GOLD PPL: [\d.inf]+ NB SENTENCES: (\d+)", dev_log.read_text())
    if not m:
        raise RaceError(f"no GOLD SCORE in {dev_log}")
    logprob = float(m.group(1)) * int(m.group(2))
    dev_tokens = target_pieces(data / "dev.sp.es")
    result["dev_ppl"] = round(float(__import__("math").exp(-logprob / dev_tokens)), 2)
    hyp_sp = run_dir / "test.hyp.sp"
    took = run(opennmt_translate(bin_dir, ckpt, data, hyp_sp), run_dir / "translate.log", env)
    hyps = decode_pieces(hyp_sp, data / "spm.es.model")
    (run_dir / "test.hyp.es").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    result.update(score(hyps, refs), translate_s=round(took, 1), sent_s=round(len(refs) / took, 1))
    return result


# -- attnmt -------------------------------------------------------------------------------------
def race_attnmt(data: Path, run_dir: Path, size: int, budget: float, threads: int, extra: list[str]) -> dict:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    env = attnmt_env(threads)
    attnmt = [sys.executable, "-m", "attnmt"]  # this checkout's attnmt
    sets = [f"data.train={data / 'train'}", f"data.src_spm={data / 'spm.en.model'}",
            f"data.tgt_spm={data / 'spm.es.model'}", f"model.hidden={size}", f"train.threads={threads}",
            f"train.log_every={REPORT_EVERY}", f"train.max_time={budget - STOP_MARGIN:g}"] + extra
    log = run_dir.parent / f"{run_dir.name}.train.log"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["timeout", "-s", "TERM", str(budget)] + attnmt + ["train", str(ROOT / "configs" / "race-lstm.yaml"),
                                                             "--out", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    records, end = [], None
    log_jsonl = run_dir / "log.jsonl"
    if not log_jsonl.exists():
        raise RaceError(f"attnmt wrote no log within {budget:g} s (see {log})")
    for line in log_jsonl.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") == "train":
            records.append((rec["time"], rec["step"], rec["tokens"]))
        elif rec.get("event") == "end":
            end = rec
    if end is None:
        raise RaceError(f"attnmt did not finish cleanly within {budget:g} s (see {log})")
    result = rates(records, budget, end["step"], end["tokens"])
    result["state"] = ("final checkpoint at train.max_time" if end.get("reason") == "budget"
                       else "checkpoint written on SIGTERM after the update in progress")
    ppl = subprocess.run(attnmt + ["score", "--model", str(run_dir), "--src", str(data / "dev.en"),
                                   "--ref", str(data / "dev.es"), "--json"],
                         capture_output=True, text=True, env=env)
    if ppl.returncode != 0:
        raise RaceError(f"attnmt score failed: {ppl.stderr.strip()[-200:]}")
    result["dev_ppl"] = round(json.loads(ppl.stdout)["ppl"], 2)
    hyp = run_dir / "test.hyp.es"
    took = run(attnmt_translate(run_dir, data, hyp), run_dir / "translate.log", env)
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    result.update(score(hyps, refs), translate_s=round(took, 1), sent_s=round(len(refs) / took, 1))
    hyp8 = run_dir / "test.int8.hyp.es"
    took = run(attnmt_translate(run_dir, data, hyp8, "--int8"), run_dir / "translate.int8.log", env)
    result.update(translate_int8_s=round(took, 1),
                  bleu_int8=score(hyp8.read_text(encoding="utf-8").splitlines(), refs)["bleu"])
    return result


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=900, help="seconds of wall clock per training")
    ap.add_argument("--sizes", default="256,512", help="comma-separated LSTM hidden sizes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/peer_race", help="working folder (data, venv, runs)")
    ap.add_argument("--data", default="data/bible", help="folder with {train,dev,test}.{en,es}")
    ap.add_argument("--venv", help="OpenNMT-py's virtual environment (default OUT/onmt-venv)")
    ap.add_argument("--only", choices=["attnmt", "opennmt"], help="run one side only")
    ap.add_argument("--set", action="append", default=[], help="extra attnmt --set overrides")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"peer_race: error: --sizes must be positive integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    if args.budget < 60:
        print("peer_race: error: --budget below 60 s leaves no room for a checkpoint", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        data = prepare_data(Path(args.data), out / "data")
        bin_dir = None if args.only == "attnmt" else install_opennmt(Path(args.venv or out / "onmt-venv"))
        rows = []
        for size in sizes:
            row: dict = {"size": size}
            if args.only != "opennmt":
                row["attnmt"] = race_attnmt(data, out / str(size) / "attnmt", size, args.budget,
                                            args.threads, args.set)
                print(f"size {size} attnmt:  {json.dumps(row['attnmt'])}", flush=True)
            if bin_dir is not None:
                row["opennmt"] = race_opennmt(bin_dir, data, out / str(size) / "opennmt", size,
                                              args.budget, args.threads)
                print(f"size {size} opennmt: {json.dumps(row['opennmt'])}", flush=True)
            flops = train_flops_per_target_piece(data, size)
            for side in ("attnmt", "opennmt"):
                if side in row:
                    row[side]["gflop_s"] = round(row[side]["tgt_tok_s"] * flops / 1e9, 1)
            if "attnmt" in row and "opennmt" in row:
                a, o = row["attnmt"], row["opennmt"]
                row["ratio"] = {
                    "tgt_tok_s": round(a["tgt_tok_s"] / o["tgt_tok_s"], 3),
                    "translate_speed": round(o["translate_s"] / a["translate_s"], 3),
                    "translate_speed_int8": round(o["translate_s"] / a["translate_int8_s"], 3),
                    "bleu_diff": round(a["bleu"] - o["bleu"], 2),
                }
                print(f"size {size}: attnmt/OpenNMT-py tokens/s {row['ratio']['tgt_tok_s']}x, "
                      f"translation {row['ratio']['translate_speed']}x faster "
                      f"({row['ratio']['translate_speed_int8']}x with --int8), "
                      f"BLEU {a['bleu']} vs {o['bleu']}", flush=True)
            rows.append(row)
    except RaceError as err:
        print(f"peer_race: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"budget": args.budget, "threads": args.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
