"""Where `attnmt translate`'s search spends its time, and what int8 products would buy (issue 13).

A tool for deciding the next translation-speed lever, not a claim: the claim is the whole
command against ``onmt_translate`` in ``benchmarks/peer_race.py``. Loads a trained run, translates
the test set (beam 5, batches of 64, as the race does) and reports:

* ``--measure split``: one worker on one thread over the first ``--lines`` sentences; the time of
  the output layer's packed product (timed per call) and its GFLOP/s, beside the whole search.
* ``--measure int8``: the whole test set with the default workers, once per variant, each in a
  fresh process: ``none`` (the float32 search), ``output`` (``attnmt translate --int8``: the
  output layer as an 8-bit product), ``all`` (also layer 2 of the LSTM and W_c; an experiment).
  Time of ``Translator.translate`` and sacreBLEU on ``--ref``.

    python benchmarks/translate_profile.py --model RUN --input OUT/data/test.en --measure split
    python benchmarks/translate_profile.py --model RUN --input OUT/data/test.en \
        --ref OUT/data/test.es --measure int8

Prints one JSON line per measurement and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def int8_everywhere() -> None:
    """Every product packed for the search as an 8-bit one (kernels/packed.py ``pack_int8``): layer
    2 of the LSTM, W_c and the output layer; layer 1's product with the embedding-gate table
    (``linear_add``) stays in float32. An experiment, not an option of attnmt."""
    from attnmt.kernels import packed

    packed.pack = packed.pack_int8


def split(args) -> dict:
    import torch

    from attnmt.decode.translate import Translator
    from attnmt.kernels import packed

    torch.set_num_threads(1)
    out = {"seconds": 0.0, "flop": 0}
    plain = packed.linear
    translator = Translator.from_run(args.model)
    vocab = translator.model.decoder.W_s.weight.shape[0]

    def timed(x, w, bias=None):
        if w.weight.shape[0] != vocab:
            return plain(x, w, bias)
        start = time.perf_counter()
        y = plain(x, w, bias)
        out["seconds"] += time.perf_counter() - start
        out["flop"] += 2 * x.numel() * vocab
        return y

    packed.linear = timed
    lines = open(args.input, encoding="utf-8").read().splitlines()[: args.lines]
    translator.translate(lines[:64], beam=5, batch_size=64, workers=1)  # warm-up
    out.update(seconds=0.0, flop=0)
    start = time.perf_counter()
    translator.translate(lines, beam=5, batch_size=64, workers=1)
    total = time.perf_counter() - start
    return {"measure": "split", "lines": len(lines), "search_s": round(total, 2),
            "output_layer_s": round(out["seconds"], 2),
            "output_layer_gflop_s": round(out["flop"] / out["seconds"] / 1e9, 1)}


def int8_once(args) -> dict:
    if args.int8 == "all":
        int8_everywhere()
    import sacrebleu

    from attnmt.decode.translate import Translator, use_int8_output_layer

    translator = Translator.from_run(args.model)
    if args.int8 != "none":
        use_int8_output_layer(translator.runs)  # what `attnmt translate --int8` does
    lines = open(args.input, encoding="utf-8").read().splitlines()
    refs = open(args.ref, encoding="utf-8").read().splitlines()
    start = time.perf_counter()
    results = translator.translate(lines, beam=5, batch_size=64)
    took = time.perf_counter() - start
    bleu = sacrebleu.corpus_bleu([r[0].text for r in results], [refs]).score
    return {"measure": "int8", "int8": args.int8, "search_s": round(took, 2), "bleu": round(bleu, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--input", required=True, help="source sentences (the race's test.en)")
    p.add_argument("--ref", help="references, for --measure int8")
    p.add_argument("--measure", choices=["split", "int8"], default="split")
    p.add_argument("--lines", type=int, default=320, help="--measure split: sentences searched")
    p.add_argument("--int8", choices=["none", "output", "all"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure == "split":
        row = split(args)
        print(json.dumps(row))
        print(f"search {row['search_s']} s on 1 thread; output layer {row['output_layer_s']} s "
              f"at {row['output_layer_gflop_s']} GFLOP/s")
        return
    if args.ref is None:
        p.error("--measure int8 needs --ref")
    if args.int8:  # one variant, in this (fresh) process
        print(json.dumps(int8_once(args)))
        return
    rows = []
    for variant in ("none", "output", "all"):
        cmd = [sys.executable, __file__, "--model", args.model, "--input", args.input, "--ref",
               args.ref, "--measure", "int8", "--int8", variant]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"measure": "int8", "rows": rows}))
    print("; ".join(f"{r['int8']}: {r['search_s']} s, BLEU {r['bleu']}" for r in rows))


if __name__ == "__main__":
    main()
