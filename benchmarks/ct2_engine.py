"""``attnmt translate --engine ctranslate2`` against CTranslate2 called directly on the same
exported model, each a whole process timed from outside, in rounds taken in turn (issue 58,
item 8: the command should be within 5 % of the direct call).

    python benchmarks/ct2_engine.py [--export DIR --input FILE] [--rounds 3] [--beam 5]
        [--hidden 256 --layers 3 --train-seconds 40 --lines 1000]

``--export``: a CTranslate2 directory, as ``attnmt export --format ctranslate2`` writes one.
``--input``: a source file. Without them the script makes its own in a temporary folder (not timed): a Transformer
(``--layers``, ``--hidden``, 4 heads, feed-forward 4 × hidden) trained for ``--train-seconds`` on a
synthetic reversal task (10 words, sentences of 3-25), exported with ``--quantization int8``,
and ``--lines`` source lines.

Timed, per round and in this order:
  direct   ``python -c`` a script as a user of CTranslate2 would write it (the README's way:
           ``attnmt.data.vocab.load_tokenizer`` for the pieces, then ``ctranslate2.Translator``
           with one single-threaded replica per core, batches of 16 sorted by length, each with
           attnmt's length rule min(512, ⌈2 · longest⌉ + 10), queued at once), writing the text;
  attnmt   ``python -m attnmt translate --engine ctranslate2 --model DIR -i FILE -o OUT --beam B``
           (its default layout: the same);
  before   the same command in the layout it had before (one replica on every core's thread,
           batches of 64: ``--inter-threads 1 --intra-threads CORES --batch-size 64``).

Prints one line per command, then a summary (median seconds, attnmt / direct) and a JSON line.
Both write the same translations (checked: ``same_output``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = "a b c d e f g h i j".split()

DIRECT = """
import math, sys
import ctranslate2
from attnmt.data.vocab import load_tokenizer
model, source, output, beam, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
src, tgt = load_tokenizer(model, "src"), load_tokenizer(model, "tgt")
translator = ctranslate2.Translator(model, device="cpu", inter_threads=cores, intra_threads=1)
lines = open(source, encoding="utf-8").read().splitlines()
pieces = [src.split(line) for line in lines]
order = sorted((i for i, p in enumerate(pieces) if p), key=lambda i: len(pieces[i]), reverse=True)
chunks = [order[k:k + 16] for k in range(0, len(order), 16)]
pending = [translator.translate_batch([pieces[i] for i in c], beam_size=beam, max_input_length=0,
           max_decoding_length=min(512, math.ceil(2 * max(len(pieces[i]) for i in c)) + 10),
           asynchronous=True) for c in chunks]
out = [""] * len(lines)
for c, results in zip(chunks, pending):
    for i, r in zip(c, results):
        out[i] = tgt.decode_pieces(r.result().hypotheses[0])
open(output, "w", encoding="utf-8").write("".join(x + "\\n" for x in out))
"""


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def make_model(folder: Path, hidden: int, layers: int, seconds: float, lines: int) -> tuple[Path, Path]:
    """(an int8 export of a Transformer trained for ``seconds`` on reversal, a source file)."""
    rng = random.Random(0)

    def pairs(n: int) -> list[tuple[str, str]]:
        out = []
        for _ in range(n):
            s = [rng.choice(WORDS) for _ in range(rng.randint(3, 25))]
            out.append((" ".join(s), " ".join(w.upper() for w in reversed(s))))
        return out

    data = folder / "data"
    data.mkdir()
    for split, n in (("train", 20000), ("dev", 100)):
        rows = pairs(n)
        (data / f"{split}.en").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
        (data / f"{split}.es").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    source = folder / "test.en"
    source.write_text("".join(s + "\n" for s, _ in pairs(lines)), encoding="utf-8")
    config = folder / "tf.yaml"
    config.write_text(
        f"data: {{train: {data}/train, dev: {data}/dev, tokenizer: word}}\n"
        f"model: {{type: transformer, layers: {layers}, hidden: {hidden}, heads: 4, ff: {4 * hidden}, "
        "dropout: 0.0}\n"
        f"train: {{optimizer: adam, lr: 0.001, warmup: 100, batch_size: 64, max_time: {seconds}, "
        "valid_every: 100000, device: cpu, seed: 1}\n", encoding="utf-8")
    run = folder / "run"
    for argv in (["train", str(config), "--out", str(run)],
                 ["export", "--format", "ctranslate2", "--model", str(run), "--out", str(folder / "ct2"),
                  "--quantization", "int8", "--checkpoint", "last"]):
        subprocess.run([sys.executable, "-m", "attnmt", *argv], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder / "ct2", source


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"ct2_engine: error: {' '.join(argv[:6])} ...: {done.stderr.strip()[-300:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", help="a CTranslate2 directory attnmt export wrote (default: make one)")
    ap.add_argument("--input", help="source text to translate (with --export)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--train-seconds", type=float, default=40.0)
    ap.add_argument("--lines", type=int, default=1000)
    args = ap.parse_args(argv)
    if bool(args.export) != bool(args.input) or args.rounds < 1:
        print("ct2_engine: error: give --export with --input (or neither); --rounds >= 1", file=sys.stderr)
        return 2
    n = cores()
    with tempfile.TemporaryDirectory(prefix="ct2-engine-") as tmp:
        folder = Path(tmp)
        if args.export:
            model, source = Path(args.export).resolve(), Path(args.input).resolve()
            made = None
        else:
            model, source = make_model(folder, args.hidden, args.layers, args.train_seconds, args.lines)
            made = {"hidden": args.hidden, "layers": args.layers, "heads": 4, "ff": 4 * args.hidden,
                    "train_seconds": args.train_seconds, "quantization": "int8", "lines": args.lines}
        outputs = {k: folder / f"{k}.txt" for k in ("direct", "attnmt", "before")}
        commands = {
            "direct": [sys.executable, "-c", DIRECT, str(model), str(source), str(outputs["direct"]),
                       str(args.beam), str(n)],
            "attnmt": [sys.executable, "-m", "attnmt", "translate", "--engine", "ctranslate2", "--model",
                       str(model), "-i", str(source), "-o", str(outputs["attnmt"]), "--beam", str(args.beam)],
            "before": [sys.executable, "-m", "attnmt", "translate", "--engine", "ctranslate2", "--model",
                       str(model), "-i", str(source), "-o", str(outputs["before"]), "--beam", str(args.beam),
                       "--inter-threads", "1", "--intra-threads", str(n), "--batch-size", "64"],
        }
        times: dict[str, list[float]] = {k: [] for k in commands}
        for r in range(args.rounds):
            for name, command in commands.items():
                for out in outputs.values():
                    out.unlink(missing_ok=True)
                seconds = timed(command)
                times[name].append(seconds)
                print(f"round {r + 1} {name:<7} {seconds:7.2f} s", flush=True)
                if name == "direct":
                    want = outputs["direct"].read_text(encoding="utf-8")
                elif name == "attnmt":
                    same = outputs["attnmt"].read_text(encoding="utf-8") == want
        lines = len(source.read_text(encoding="utf-8").splitlines())
    median = {k: round(statistics.median(v), 3) for k, v in times.items()}
    ratio = round(median["attnmt"] / median["direct"], 3)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"benchmark": "ct2_engine", "cores": n, "beam": args.beam, "lines": lines, "model": made,
              "layout": {"inter_threads": n, "intra_threads": 1, "max_batch_size": 16},
              "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()}, "median_s": median,
              "attnmt_over_direct": ratio, "before_over_direct": round(median["before"] / median["direct"], 3),
              "within_5_percent": ratio <= 1.05, "same_output": same, "commit": commit,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    print(f"median: direct {median['direct']:.2f} s, attnmt {median['attnmt']:.2f} s ({ratio:.3f}x direct), "
          f"before {median['before']:.2f} s; {n} cores, beam {args.beam}, {lines} lines; same output: {same}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
