"""The race a user runs: attnmt against OpenNMT-py 3.5.1 or eole 0.6, same corpus, same model, same
recipe, same wall clock; for the Transformer also against CTranslate2 4.x in translation.

    python benchmarks/peer_race.py [--model lstm|transformer] [--peer opennmt|eole] --budget 900
        --sizes 256,512 [--threads 2] [--out DIR] [--data data/bible] [--only attnmt|peer]
        [--recipe attnmt|peer] [--ct2 float32,int8] [--set section.key=value ...]
        [--max-train-lines N --max-eval-lines M --report-every K]   (smoke tests only)

What it does, on the machine it runs on:

1. **Data, identical for both sides.** ``DATA/{train,dev,test}.{en,es}`` (``attnmt data bible --out
   data/bible``), stripped, go to ``OUT/data``. One sentencepiece unigram model of 8,000 pieces per
   language is trained on the train side (character coverage 1.0, attnmt's special ids), and every
   split is encoded with it into pieces for the peer. attnmt reads the same model
   (``data.src_spm`` / ``data.tgt_spm``), so both train on the same pieces.
2. **The peer** is installed into its own virtual environment (``OUT/onmt-venv`` or
   ``OUT/eole-venv``, or ``--venv``) on the torch 2.13 CPU wheel, with ``--no-deps`` plus the
   packages its tools import (the exact steps: ``benchmarks/race_peers.py``). OpenNMT-py's tools
   run with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch ≥ 2.6 refuses its checkpoints otherwise).
3. **The model**, both sides. LSTM (``configs/race-lstm.yaml``, ``model.hidden=SIZE``): 2-layer
   LSTM encoder and decoder, hidden SIZE, embeddings 256, Luong ``general`` attention with input
   feeding, dropout 0.2, batches of 64 sentences, pairs up to 100 pieces, uniform initialisation
   in ±0.1. Transformer (``configs/race-transformer.yaml``): 3+3 layers, d SIZE, SIZE/64 heads, ff
   4·SIZE, pre-norm, sinusoidal positions, tied decoder embeddings, dropout 0.1, ~2,000-token
   batches. The peer's configuration is written from attnmt's loaded config
   (``race_peers.peer_config``; what cannot match is listed there).
4. **The recipe**, both sides (``--recipe attnmt``, the default): attnmt's Adam (β2 0.98) with a
   linear warm-up to its peak lr and inverse-square-root decay as the peer's ``noam`` schedule
   (``learning_rate = peak · √(d · warmup)``), its label smoothing and gradient clipping. ``--recipe
   peer`` gives the LSTM peer OpenNMT-py's reference recipe instead (Adam 0.001 constant, gradient
   norm 5, no smoothing): the race before 2026-12-03.
5. **Training**, one side after the other, each for BUDGET seconds of wall clock for the whole
   command (start-up, vocabulary, data loading and checkpoints included): the peer under
   ``timeout BUDGET``, saving a checkpoint every 25 updates (its last one before the kill is its
   result: on average it loses half of 25 updates); attnmt with ``train.max_time = BUDGET - 10``
   seconds of update time (so a schedule that decays over the budget reaches its end), after which
   it writes its final checkpoint and exits, under ``timeout -s TERM BUDGET`` as a safety net.
   Neither validates inside the budget.
6. **Measures.** ``steps``: updates in the evaluated state. ``tgt_tok_s``: target pieces per second
   (``</s>`` included, padding excluded) between the first and the last progress report of the run,
   from each side's own log (the peer: ``bsz`` target pieces × 25 updates per report; attnmt: the
   ``tokens`` counter of log.jsonl), so start-up is not counted; ``s_per_step`` likewise;
   ``tgt_tok_s_median``: the median of the rates between consecutive reports, which a stretch of
   disturbance does not move.
   ``budget_tok_s``: pieces trained in the evaluated state / BUDGET. ``dev_ppl``: per target piece
   (``</s>`` included) of the dev set under the evaluated state (the peer: its translator's GOLD
   score with ``-tgt``, converted from per sentence to per piece; attnmt: ``attnmt score --model``).
   ``translate_s``: the whole translation command on the test set, beam 5, batches of 64 sentences,
   timed from outside, every side's Python modules as bytecode (the peers' and PyTorch's compiled
   when pip installed them; this checkout's attnmt by ``attnmt_env``, once: where
   PYTHONDONTWRITEBYTECODE is set, a checkout would otherwise compile the ~77 modules a
   translation imports at every start: 0.05-0.15 s a command); ``sent_s`` = test sentences / translate_s. attnmt is timed a second
   time with ``--int8`` (8-bit products where the model takes them): ``translate_int8_s``,
   ``bleu_int8`` (``translate_int8``: the error where this checkout's ``--int8`` refuses the model). ``bleu`` / ``chrf``: sacrebleu's defaults on the detokenised output (the peer's
   pieces decoded with the sentencepiece model) against the raw Spanish test side, the same call
   for all.
7. **CTranslate2** (Transformer only; CTranslate2 converts no RNN): the peer's evaluated checkpoint
   converted (not timed), then ``race_ct2.py translate`` run with the peer's venv Python as its own
   process, timed from outside (start-up and model loading included), once per compute type of
   ``--ct2`` (``float32``, ``int8`` = int8 weights and float32 activations on CPU) and thread
   layout, beam 5, batches of 64: ``ct2[TYPE]`` with ``intra_threads`` = the race's threads (one
   translation on all of them), ``ct2[TYPE-inter]`` with ``inter_threads`` = the race's threads
   and one thread each (OpenMP and MKL on one thread too: batches translated at once, as
   attnmt's ``--workers``; the faster layout on 2 vCPUs, docs/results/race.md "CTranslate2 on
   this CPU"), and in that layout with int8 also batches of 32 and 16 (``ct2[int8-inter-b32]``,
   ``-b16``: CTranslate2 is fastest at 16-32 there, attnmt at 64). Each is {translate_s, batch, bleu, chrf,
   compute_type, intra_threads, inter_threads, busy_threads, isa, cpu_s}; the ratio row's
   ``ct2_best`` names the fastest (attnmt's side stays at 64, its own best on that box). The same runs on **attnmt's own model** (``attnmt export
   --format ctranslate2``, float32 weights, not timed) go under attnmt's ``ct2``: the same weights
   in both engines, so equal quality, which two models trained for the same budget are not
   (``ct2_same_model_best``, ``translate_speed_vs_ct2_same_model`` in the ratio row, and
   ``translate_speed_int8_vs_ct2_same_model``: attnmt's ``--int8`` against that fastest one).
   CTranslate2 gets attnmt's length rule (``CT2_LIMIT``: ≤ 2|x| + 10 pieces a line, by batch, as
   ``race_ct2.py --limit`` says; rows before 2026-12-05 08:10 gave it 250 pieces for every line).
   CTranslate2 ends a sentence when it has beam-size finished hypotheses (its ``patience`` 1);
   attnmt's default, OpenNMT-py's rule, ends it when the best extension ends it, which writes
   shorter outputs. So attnmt's ``--int8`` is timed a third time with ``--stop complete``, the
   same rule as CTranslate2's: ``translate_int8_complete_s``, ``bleu_int8_complete``, and
   ``translate_speed_int8_vs_ct2_same_rule`` in the ratio row (the like-for-like search).

Each side also writes ``result.json`` in its folder (its result, the race settings, commit and
time): with ``--only``, a row takes the other side from there when an earlier run in the same OUT
had the same settings (marked ``raced``), so one side can be re-raced after a change; a row whose
sides ran further apart than one run leaves them says so (``race_sides.py``).

The last line printed is one JSON object ``{"model": m, "peer": p, "recipe": r, "budget": s,
"threads": n, "rows": [{"size": 512, "attnmt": {...}, PEER: {...}, "ratio": {...}}, ...]}``. Each
side writes its files under ``OUT/SIZE/SIDE`` (LSTM) or ``OUT/transformer-SIZE/SIDE``. Run it on an
otherwise idle machine: the sides run one after the other, never together.
"""

from __future__ import annotations

import argparse
import compileall
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import race_peers  # noqa: E402
from race_peers import PEERS, TITLE, RaceError  # noqa: E402
from race_sides import apart_note, save_side  # noqa: E402
from race_sides import load_side as load_saved  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STOP_MARGIN = 10  # attnmt stops itself this many seconds of update time before the budget (start-up
# and checkpoints take ~5 s), so a schedule that decays over the budget ends where it should
REPORT_EVERY = 25  # both sides: a progress record (and, for the peer, a checkpoint) every 25 updates
CONFIGS = {"lstm": ROOT / "configs" / "race-lstm.yaml", "transformer": ROOT / "configs" / "race-transformer.yaml"}
CT2_SCRIPT = Path(__file__).resolve().parent / "race_ct2.py"
CT2_LIMIT = "2,10,512"  # attnmt translate's length rule (max_len_ratio, max_len_extra, max_len_cap), given to CTranslate2
ONMT_VERSION = race_peers.ONMT_VERSION


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
def prepare_data(src_dir: Path, out: Path, max_train: int = 0, max_eval: int = 0) -> Path:
    """Stripped text, one sentencepiece model per language, and piece files for the peers;
    ``max_train`` / ``max_eval`` (0: all) keep the first lines of train / of dev and test."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    done = out / "READY"
    if done.exists():
        return out
    for split in ("train", "dev", "test"):
        keep = max_train if split == "train" else max_eval
        for lang in ("en", "es"):
            path = src_dir / f"{split}.{lang}"
            if not path.is_file():
                raise RaceError(f"{path}: not found (build the corpus with: attnmt data bible --out {src_dir})")
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
            lines = lines[:keep] if keep else lines
            (out / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    for lang in ("en", "es"):
        spm.SentencePieceTrainer.train(
            input=str(out / f"train.{lang}"), model_prefix=str(out / f"spm.{lang}"), vocab_size=8000,
            model_type="unigram", character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
            minloglevel=2, num_threads=2, hard_vocab_limit=not max_train,
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
    """Floating-point operations one training update spends per target piece, for the race's LSTM
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
    windows = sorted((kb - ka) / max(tb - ta, 1e-9) for (ta, _, ka), (tb, _, kb) in zip(records, records[1:]))
    return {
        "steps": steps,
        "s_per_step": round((t1 - t0) / max(s1 - s0, 1), 3),
        "tgt_tok_s": round((k1 - k0) / max(t1 - t0, 1e-9), 1),
        # the median report-to-report rate: what a stretch of disturbance (another process on one
        # of the two cores stalls both OpenMP threads) does not move, unlike the mean above
        "tgt_tok_s_median": round(windows[len(windows) // 2], 1),
        "budget_tok_s": round(tokens / budget, 1),
        "tgt_tokens": tokens,
    }


def attnmt_sets(model: str, data: Path, size: int, threads: int, budget: float, extra: list[str],
                report_every: int = REPORT_EVERY) -> list[str]:
    """The race's ``--set`` overrides of attnmt's config (the peer's config is written from the
    config they give)."""
    sets = [f"data.train={data / 'train'}", f"data.src_spm={data / 'spm.en.model'}",
            f"data.tgt_spm={data / 'spm.es.model'}", f"model.hidden={size}"]
    if model == "transformer":
        sets += [f"model.heads={max(size // 64, 1)}", f"model.ff={4 * size}"]
    return sets + [f"train.threads={threads}", f"train.log_every={report_every}",
                   f"train.max_time={budget - STOP_MARGIN:g}"] + extra


def attnmt_config(model: str, sets: list[str]):
    """attnmt's loaded race config (this checkout's attnmt)."""
    sys.path.insert(0, str(ROOT))
    from attnmt.config import load_config
    from attnmt.errors import UserError

    try:
        return load_config(CONFIGS[model], sets)
    except UserError as err:
        raise RaceError(str(err)) from None


# -- the peer -----------------------------------------------------------------------------------
def peer_env(peer: str, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop("PYTHONPATH", None)  # the peer's venv only
    if peer == "opennmt":
        env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    return env


def opennmt_env(threads: int) -> dict:
    return peer_env("opennmt", threads)


def opennmt_translate(bin_dir: Path, ckpt: Path, data: Path, hyp_sp: Path) -> list[str]:
    """The race's onmt_translate command (beam 5, batches of 64 sentences) of the test pieces."""
    return race_peers.translate_cmd("opennmt", bin_dir, ckpt, data / "test.sp.en", hyp_sp)


def decode_pieces(path: Path, spm_model: Path) -> list[str]:
    """The peer's output pieces, one line each, as text (the sentencepiece model's decoding)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return [sp.decode(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]


def scored_pieces(hyp_sp: Path, data: Path, refs: list[str]) -> dict:
    hyps = decode_pieces(hyp_sp, data / "spm.es.model")
    hyp_sp.with_suffix(".es").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    return score(hyps, refs)


def race_peer(peer: str, model: str, bin_dir: Path, data: Path, run_dir: Path, budget: float, threads: int,
              cfg, recipe: str, ct2_types: list[str], report_every: int = REPORT_EVERY, bucket_size: int = 0) -> dict:
    import yaml

    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    env = peer_env(peer, threads)
    config = run_dir / "config.yaml"
    config.write_text(yaml.safe_dump(race_peers.peer_config(peer, model, cfg, data, run_dir, recipe, report_every,
                                                            bucket_size),
                                     sort_keys=False), encoding="utf-8")
    run(race_peers.build_vocab(peer, bin_dir, config), run_dir / "build_vocab.log", env)
    log = run_dir / "train.log"
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(["timeout", str(budget)] + race_peers.train_cmd(peer, bin_dir, config),
                       stdout=out, stderr=subprocess.STDOUT, env=env)
    ckpts = race_peers.checkpoints(peer, run_dir)
    if not ckpts:
        raise RaceError(f"{TITLE[peer]} saved no checkpoint within {budget:g} s (see {log}): raise --budget")
    steps, ckpt = ckpts[-1]
    records = race_peers.reports(log)
    tokens = next((k for _, s, k in records if s == steps), None)
    if tokens is None:
        raise RaceError(f"no progress report at step {steps} in {log}")
    result = rates(records, budget, steps, tokens)
    result["state"] = f"{ckpt.name}: the last checkpoint written before the budget ran out"
    # dev perplexity per piece from the translator's gold score (log p per sentence, </s> included)
    dev_log = run_dir / "dev_gold.log"
    run(race_peers.translate_cmd(peer, bin_dir, ckpt, data / "dev.sp.en", run_dir / "dev.hyp.sp", beam=1,
                                 tgt=data / "dev.sp.es"), dev_log, env)
    result["dev_ppl"] = round(math.exp(-race_peers.gold_logprob(dev_log) / target_pieces(data / "dev.sp.es")), 2)
    refs = (data / "test.es").read_text(encoding="utf-8").splitlines()
    hyp_sp = run_dir / "test.hyp.sp"
    took = run(race_peers.translate_cmd(peer, bin_dir, ckpt, data / "test.sp.en", hyp_sp), run_dir / "translate.log", env)
    result.update(scored_pieces(hyp_sp, data, refs), translate_s=round(took, 1), sent_s=round(len(refs) / took, 1))
    if model == "transformer" and ct2_types:
        result["ct2"] = race_ct2(peer, bin_dir, ckpt, data, run_dir, threads, ct2_types, refs)
    return result


CT2_LAYOUTS = ("intra", "inter")  # threads of one translation | translations at once, one thread each
# sentences per batch: the race's 64 in both layouts; in "inter" with int8 (its fastest compute type
# on these CPUs) also the sizes CTranslate2 is fastest at on 2 vCPUs (16-32, 20-40 % faster than 64;
# docs/results/race.md), so ct2_best is CTranslate2 at its best
CT2_BATCHES = (64, 32, 16)


def ct2_threads(layout: str, threads: int) -> tuple[int, int]:
    """(intra_threads, inter_threads) of a CTranslate2 layout: "intra" gives one translation
    all the race's threads (the issue's setting), "inter" runs that many batches at once on one
    thread each (as attnmt translate's --workers): on 2 vCPUs the faster one (race.md)."""
    return (threads, 1) if layout == "intra" else (1, threads)


def race_ct2(peer: str, bin_dir: Path, ckpt: Path, data: Path, run_dir: Path, threads: int, types: list[str],
             refs: list[str]) -> dict:
    """CTranslate2 on the peer's checkpoint: converted once (not timed), then ``ct2_translations``."""
    python = str(bin_dir / "python")
    env = peer_env(peer, threads)
    ct2_dir = run_dir / "ct2"
    run([python, str(CT2_SCRIPT), "convert", "--peer", peer, str(ckpt), str(ct2_dir)], run_dir / "ct2_convert.log", env)
    return ct2_translations(python, env, ct2_dir, data, run_dir, threads, types, refs)


def ct2_translations(python: str, env: dict, ct2_dir: Path, data: Path, run_dir: Path, threads: int,
                     types: list[str], refs: list[str]) -> dict:
    """One timed ``race_ct2.py translate`` process per compute type, thread layout and batch size
    of a converted model (keys TYPE for "intra", TYPE-inter for "inter", -bN for batches of N
    other than 64), scored as the others."""
    out = {}
    for kind, layout in ((kind, layout) for kind in types for layout in CT2_LAYOUTS):
        for batch in CT2_BATCHES if layout == "inter" and kind.startswith("int8") else CT2_BATCHES[:1]:
            name = (kind if layout == "intra" else f"{kind}-inter") + ("" if batch == 64 else f"-b{batch}")
            intra, inter = ct2_threads(layout, threads)
            hyp_sp = run_dir / f"test.ct2-{name}.hyp.sp"
            log = run_dir / f"ct2-{name}.log"
            # OpenMP/MKL on intra_threads per replica (the race's count: 4 busy threads, +25 % CPU)
            layout_env = {**env, "OMP_NUM_THREADS": str(intra), "MKL_NUM_THREADS": str(intra)}
            took = run([python, str(CT2_SCRIPT), "translate", str(ct2_dir), str(data / "test.sp.en"), str(hyp_sp),
                        "--compute-type", kind, "--threads", str(intra), "--inter", str(inter), "--limit", CT2_LIMIT,
                        "--batch", str(batch)], log, layout_env)
            info = json.loads(log.read_text(encoding="utf-8").strip().splitlines()[-1])
            out[name] = {"translate_s": round(took, 1), "sent_s": round(len(refs) / took, 1), "batch": batch,
                         **scored_pieces(hyp_sp, data, refs), **info}
            print(f"  ctranslate2 {name} ({ct2_dir}): {took:.1f} s ({info['compute_type']}, intra_threads {intra}, "
                  f"inter_threads {inter}, batches of {batch}, {info['busy_threads']} busy threads, ISA {info['isa']}, "
                  f"{info['cpu_s']} CPU s)", flush=True)
    return out


# -- attnmt -------------------------------------------------------------------------------------
def attnmt_env(threads: int) -> dict:
    """This checkout's attnmt on ``threads`` threads, its modules compiled to bytecode (once, as pip
    compiles an installed package's: the module docstring, 6)."""
    compileall.compile_dir(str(ROOT / "attnmt"), quiet=1)  # only what changed since the last call
    path = os.pathsep.join([str(ROOT)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": path}


def attnmt_translate(run_dir: Path, data: Path, hyp: Path, *flags: str) -> list[str]:
    """The race's attnmt translation command (beam 5, batches of 64) of the test set into ``hyp``."""
    return [sys.executable, "-m", "attnmt", "translate", "--model", str(run_dir), "--input",
            str(data / "test.en"), "--output", str(hyp), "--beam", "5", "--batch-size", "64", *flags]


def attnmt_progress(run_dir: Path, budget: float, log: Path) -> tuple[list[tuple[float, int, int]], dict]:
    """(time, step, cumulative target pieces) of each progress record in the run's log.jsonl, and
    its end record; RaceError (naming the training ``log``) if there is none."""
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
    return records, end


def race_attnmt(model: str, data: Path, run_dir: Path, budget: float, threads: int, sets: list[str],
                ct2_types: list[str] = (), int8: bool = True) -> dict:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    env = attnmt_env(threads)
    attnmt = [sys.executable, "-m", "attnmt"]  # this checkout's attnmt
    log = run_dir.parent / f"{run_dir.name}.train.log"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["timeout", "-s", "TERM", str(budget)] + attnmt + ["train", str(CONFIGS[model]), "--out", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    records, end = attnmt_progress(run_dir, budget, log)
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
    if int8:
        try:
            took = run(attnmt_translate(run_dir, data, hyp8, "--int8"), run_dir / "translate.int8.log", env)
            result.update(translate_int8_s=round(took, 1),
                          bleu_int8=score(hyp8.read_text(encoding="utf-8").splitlines(), refs)["bleu"])
        except RaceError as err:  # a checkout whose --int8 does not take this model: say so, race on
            result["translate_int8"] = str(err)
    if model == "transformer" and ct2_types:
        # CTranslate2 on attnmt's own model (``attnmt export``): the same weights, so the same
        # quality, which the peer's model at equal budget is not
        ct2_dir = run_dir / "ct2"
        run(attnmt + ["export", "--format", "ctranslate2", "--model", str(run_dir), "--out", str(ct2_dir),
                      "--checkpoint", "last", "--force"], run_dir / "ct2_export.log", env)
        ct2_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        result["ct2"] = ct2_translations(sys.executable, ct2_env, ct2_dir, data, run_dir, threads, ct2_types, refs)
        if int8 and "translate_int8_s" in result:
            # CTranslate2's stopping rule (a sentence ends with beam_size finished hypotheses, its
            # patience 1): attnmt's --stop complete, so both engines search alike
            hyp_c = run_dir / "test.int8.complete.hyp.es"
            took = run(attnmt_translate(run_dir, data, hyp_c, "--int8", "--stop", "complete"),
                       run_dir / "translate.int8.complete.log", env)
            result.update(translate_int8_complete_s=round(took, 1),
                          bleu_int8_complete=score(hyp_c.read_text(encoding="utf-8").splitlines(), refs)["bleu"])
    return result


def ratios(row: dict, peer: str) -> dict:
    """attnmt against the peer (and CTranslate2's fastest compute type): > 1 means attnmt is faster."""
    a, o = row["attnmt"], row[peer]
    out = {"tgt_tok_s": round(a["tgt_tok_s"] / o["tgt_tok_s"], 3),
           "translate_speed": round(o["translate_s"] / a["translate_s"], 3),
           **({"tgt_tok_s_median": round(a["tgt_tok_s_median"] / o["tgt_tok_s_median"], 3)}
              if "tgt_tok_s_median" in a and "tgt_tok_s_median" in o else {}),
           "bleu_diff": round(a["bleu"] - o["bleu"], 2)}
    if "translate_int8_s" in a:
        out["translate_speed_int8"] = round(o["translate_s"] / a["translate_int8_s"], 3)
    if o.get("ct2"):
        best = min(o["ct2"], key=lambda k: o["ct2"][k]["translate_s"])
        out["ct2_best"] = best
        out["translate_speed_vs_ct2"] = round(o["ct2"][best]["translate_s"] / a["translate_s"], 3)
    if a.get("ct2"):  # the same model in both engines: the ratio at equal quality
        best = min(a["ct2"], key=lambda k: a["ct2"][k]["translate_s"])
        out["ct2_same_model_best"] = best
        out["translate_speed_vs_ct2_same_model"] = round(a["ct2"][best]["translate_s"] / a["translate_s"], 3)
        if "translate_int8_s" in a:  # both engines at their 8-bit best on the same weights
            out["translate_speed_int8_vs_ct2_same_model"] = round(
                a["ct2"][best]["translate_s"] / a["translate_int8_s"], 3)
        if "translate_int8_complete_s" in a:  # ... and with the same stopping rule
            out["translate_speed_int8_vs_ct2_same_rule"] = round(
                a["ct2"][best]["translate_s"] / a["translate_int8_complete_s"], 3)
    return out


def load_side(folder: Path, args) -> dict | None:
    """``race_sides.load_side``, with the median rate of a peer side saved before it existed."""
    result = load_saved(folder, args)
    if result is not None and "tgt_tok_s_median" not in result and (folder / "train.log").is_file():
        result["tgt_tok_s_median"] = rates(race_peers.reports(folder / "train.log"), args.budget, result["steps"],
                                           result["tgt_tokens"])["tgt_tok_s_median"]
    return result


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["lstm", "transformer"], default="lstm")
    ap.add_argument("--peer", choices=list(PEERS), default="opennmt")
    ap.add_argument("--recipe", choices=["attnmt", "peer"], default="attnmt",
                    help="attnmt: the peer trains with attnmt's recipe (default); peer: OpenNMT-py's reference LSTM recipe")
    ap.add_argument("--budget", type=float, default=900, help="seconds of wall clock per training")
    ap.add_argument("--sizes", default="256,512", help="comma-separated hidden sizes (LSTM hidden, Transformer d)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/peer_race", help="working folder (data, venvs, runs)")
    ap.add_argument("--data", default="data/bible", help="folder with {train,dev,test}.{en,es}")
    ap.add_argument("--venv", help="the peer's virtual environment (default OUT/onmt-venv or OUT/eole-venv)")
    ap.add_argument("--only", choices=["attnmt", "peer", *PEERS, "none"],
                    help="run one side only (a row still gets its ratios from the other side's "
                         "OUT/.../SIDE/result.json of an earlier run with the same settings); "
                         "none: race nothing, print the rows of the sides raced earlier")
    ap.add_argument("--ct2", default="float32,int8", help="CTranslate2 compute types (Transformer; '' = none)")
    ap.add_argument("--max-train-lines", type=int, default=0, help="smoke tests: first N training pairs only")
    ap.add_argument("--max-eval-lines", type=int, default=0, help="smoke tests: first N dev and test pairs only")
    ap.add_argument("--report-every", type=int, default=REPORT_EVERY,
                    help="updates between progress reports and peer checkpoints (smoke tests: fewer)")
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
    if args.only in PEERS and args.only != args.peer:
        print(f"peer_race: error: --only {args.only} with --peer {args.peer}", file=sys.stderr)
        return 2
    if args.recipe == "peer" and args.model != "lstm":
        print("peer_race: error: --recipe peer exists for the LSTM (OpenNMT-py's reference recipe)", file=sys.stderr)
        return 2
    out, peer = Path(args.out), args.peer
    run_peer, run_ours = args.only in (None, "peer", peer), args.only in (None, "attnmt")
    ct2_types = [t for t in args.ct2.split(",") if t.strip()]
    cut = f"-{args.max_train_lines}-{args.max_eval_lines}" if args.max_train_lines or args.max_eval_lines else ""
    try:
        data = prepare_data(Path(args.data), out / f"data{cut}", args.max_train_lines, args.max_eval_lines)
        default_venv = out / ("onmt-venv" if peer == "opennmt" else "eole-venv")
        bin_dir = race_peers.install(peer, Path(args.venv or default_venv)) if run_peer else None
        rows = []
        for size in sizes:
            row: dict = {"size": size}
            folder = out / (str(size) if args.model == "lstm" else f"transformer-{size}")
            sets = attnmt_sets(args.model, data, size, args.threads, args.budget, args.set, args.report_every)
            cfg = attnmt_config(args.model, sets)
            if run_ours:
                row["attnmt"] = race_attnmt(args.model, data, folder / "attnmt", args.budget, args.threads, sets,
                                            ct2_types)
                save_side(folder / "attnmt", row["attnmt"], args)
                print(f"size {size} attnmt:  {json.dumps(row['attnmt'])}", flush=True)
            elif (saved := load_side(folder / "attnmt", args)) is not None:
                row["attnmt"] = saved
            if bin_dir is not None:
                row[peer] = race_peer(peer, args.model, bin_dir, data, folder / peer, args.budget, args.threads,
                                      cfg, args.recipe, ct2_types, args.report_every,
                                      2048 if args.max_train_lines else 0)
                save_side(folder / peer, row[peer], args)
                print(f"size {size} {peer}: {json.dumps(row[peer])}", flush=True)
            elif (saved := load_side(folder / peer, args)) is not None:
                row[peer] = saved
            if args.model == "lstm":
                flops = train_flops_per_target_piece(data, size)
                for side in ("attnmt", peer):
                    if side in row:
                        row[side]["gflop_s"] = round(row[side]["tgt_tok_s"] * flops / 1e9, 1)
            if "attnmt" in row and peer in row:
                row["ratio"] = r = ratios(row, peer)
                a, o = row["attnmt"], row[peer]
                extra = f" ({r['translate_speed_int8']}x with --int8)" if "translate_speed_int8" in r else ""
                ct2 = (f", {r['translate_speed_vs_ct2']}x CTranslate2 {r['ct2_best']} on the peer's model"
                       if "translate_speed_vs_ct2" in r else "")
                if "translate_speed_vs_ct2_same_model" in r:
                    ct2 += (f", {r['translate_speed_vs_ct2_same_model']}x CTranslate2 "
                            f"{r['ct2_same_model_best']} on attnmt's model")
                    if "translate_speed_int8_vs_ct2_same_model" in r:
                        ct2 += f" ({r['translate_speed_int8_vs_ct2_same_model']}x with --int8"
                        if "translate_speed_int8_vs_ct2_same_rule" in r:
                            ct2 += (f", {r['translate_speed_int8_vs_ct2_same_rule']}x with --int8 "
                                    "--stop complete, CTranslate2's stopping rule")
                        ct2 += ")"
                print(f"size {size}: attnmt/{TITLE[peer]} tokens/s {r['tgt_tok_s']}x, "
                      f"translation {r['translate_speed']}x faster{extra}{ct2}, "
                      f"BLEU {a['bleu']} vs {o['bleu']}", flush=True)
                if note := apart_note(row, ("attnmt", peer), args.budget):
                    row["ratio"]["sides_apart"] = note
                    print(f"size {size}: note: {note}", flush=True)
            rows.append(row)
    except RaceError as err:
        print(f"peer_race: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"model": args.model, "peer": peer, "recipe": args.recipe, "budget": args.budget,
                      "threads": args.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
