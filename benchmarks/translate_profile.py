"""Where `attnmt translate`'s search spends its time, and what int8 products would buy (issue 13).

A tool for deciding the next translation-speed lever, not a claim: the claim is the whole
command against ``onmt_translate`` in ``benchmarks/peer_race.py``. Loads a trained run, translates
the test set (beam 5, batches of 64, as the race does) and reports:

* ``--measure split``: one worker on one thread over the first ``--lines`` sentences; the time of
  the output layer's packed product (timed per call) and its GFLOP/s, beside the whole search.
* ``--measure int8``: the whole test set with the default workers, once per ``--int8`` variant,
  each in a fresh process: ``none`` (today's fp32 search), ``output`` (the output layer's product
  as an int8 dynamic-quantised product, per-row weight scales), ``all`` (every packed product:
  LSTM layers, W_c, output layer). Time of ``Translator.translate`` and sacreBLEU on
  ``--ref``. int8 is not a feature of attnmt: it rests on torch.ao's quantised tensors, which
  torch 2.13 marks deprecated, and it moves BLEU (docs/results/race.md, "Translation").

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
import warnings


def quantise_packed_products(which: str) -> None:
    """Route attnmt.models.packed's products through int8 dynamic-quantised linears: the output
    layer's only (``output``, recognised as the product with the most output rows) or all."""
    import torch

    from attnmt.models import packed

    plain_pack, plain_linear, plain_add = packed.pack, packed.linear, packed.linear_add

    def pack(weight, rows=64):
        p = plain_pack(weight, rows)
        w = weight.detach()
        if which == "all" or w.shape[0] >= 4096:  # the vocabulary; LSTM gates are 4H ≤ 4096 here
            q = torch.ao.nn.quantized.dynamic.Linear(w.shape[1], w.shape[0])
            scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
            zero = torch.zeros(w.shape[0], dtype=torch.long)
            q.set_weight_bias(torch.quantize_per_channel(w, scale, zero, 0, torch.qint8), None)
            p.int8 = q
        return p

    def linear(x, w, bias=None):
        q = getattr(w, "int8", None)
        if q is None:
            return plain_linear(x, w, bias)
        y = q(x)
        return y if bias is None else y.add_(bias)

    def linear_add(x, w, other):
        q = getattr(w, "int8", None)
        return plain_add(x, w, other) if q is None else q(x).add_(other)

    packed.pack, packed.linear, packed.linear_add = pack, linear, linear_add


def split(args) -> dict:
    import torch

    from attnmt.decode.translate import Translator
    from attnmt.models import packed

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
    warnings.filterwarnings("ignore")  # torch.ao's deprecation notice
    if args.int8 != "none":
        quantise_packed_products(args.int8)
    import sacrebleu

    from attnmt.decode.translate import Translator

    translator = Translator.from_run(args.model)
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
