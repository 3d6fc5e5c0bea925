"""CPU time of a training update per attention variant, on the race's own batches, each variant in
a process of its own (issue 37's "window variants' training step ≤ 1.3× standard's").

    python benchmarks/variant_updates.py --data exp/race-tf/data [--variants standard,window-add-seg,window-add-seg+paper]
        [--updates 30] [--rounds 3] [--hidden 256] [--checkouts DIR,DIR] [--flops]

The update is the trainer's on a CPU: ``token_loss`` (fused output layer and label-smoothed loss,
smoothing 0.1), bfloat16 products where the CPU has them (``train.amp``), torch's fused Adam, the
allocator kept from returning memory (``train/allocator.py``); the model is
``configs/race-transformer.yaml`` at d ``--hidden`` (hidden/64 heads, ff 4·hidden), the variant in
encoder self- and cross-attention of every layer (``+paper``: with the authors' preset; ``+KEY=VALUE``:
with ``model.window_KEY``, e.g. ``window-add-seg+mask=full``, the ablation without the window; a
dotted key is a config key as given: ``window-add-seg+paper+model.attention_layers=2`` is the
authors' placement, configs/paper-window-add-seg.yaml's lower 2 of 3 layers), and the
batches are the race's: ~2,000 target tokens of its pieces (``peer_race.py``'s data folder), so
their shapes change at every update as a training run's do. Unlike ``window_attention.py`` (one
fixed batch, the variants interleaved in one process), each variant runs in its own process, with
its own cache of oneDNN's compiled kernels, as a training run has. Time: the process's CPU time on
one thread over ``--updates`` updates after 5 of warm-up (robust to other processes on the box).
Rounds rotate the order; a variant's ratio is the median over rounds of its time over standard's
in the same round. ``--checkouts``: the same for each of several checkouts of attnmt (a before and
after), every (checkout, variant) in each round.

``--flops``: the floating-point operations of the update's products (linear maps, attention's
batched products, the output layer; forward and backward, counted by torch's FlopCounterMode on the
same batches for every variant), counted once per variant after its timing: a machine-independent
measure of how much more multiplying a variant does, beside its time.

Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # checkout_rounds beside this script
from checkout_rounds import checkout_dirs, run_rounds  # noqa: E402

PLACEMENT = ["model.enc_self_attention={v}", "model.cross_attention={v}"]


def variant_sets(spec: str) -> list[str]:
    """The config overrides of a variant spec: "window-add-seg+paper+model.attention_layers=2" ->
    the variant in PLACEMENT, then per "+" option a preset ("paper"), a window key ("mask=full" ->
    model.window_mask=full) or a dotted config key as given."""
    variant, _, options = spec.partition("+")
    sets = [] if variant == "standard" else [s.format(v=variant) for s in PLACEMENT]
    for option in filter(None, options.split("+")):
        key, _, value = option.partition("=")
        if not value:
            sets.append(f"model.window_preset={option}")
        else:
            sets.append(f"{key}={value}" if "." in key else f"model.window_{key}={value}")
    return sets


def worker(args) -> None:
    """One variant's updates in this process (run with the checkout as the working directory)."""
    sys.path.insert(0, os.getcwd())
    import sentencepiece as spm
    import torch

    from attnmt.config import load_config
    from attnmt.data.batching import filter_by_length, iterate_batches, make_batches
    from attnmt.kernels import packed
    from attnmt.models import build_model
    from attnmt.train.allocator import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(1)
    data = Path(args.data)
    sets = variant_sets(args.worker)
    h = args.hidden
    cfg = load_config(Path("configs/race-transformer.yaml"),
                      [f"model.hidden={h}", f"model.heads={max(h // 64, 1)}", f"model.ff={4 * h}", *sets])
    sp = {lang: spm.SentencePieceProcessor(model_file=str(data / f"spm.{lang}.model")) for lang in ("en", "es")}
    ids = {lang: [sp[lang].encode(line) for line in
                  (data / f"train.{lang}").read_text(encoding="utf-8").splitlines()[: args.lines]]
           for lang in ("en", "es")}
    src, tgt, _ = filter_by_length(ids["en"], ids["es"], cfg.data.max_len)
    torch.manual_seed(0)
    model = build_model(cfg, sp["en"].get_piece_size(), sp["es"].get_piece_size()).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    order = make_batches(src, tgt, cfg.train.batch_size, cfg.train.batch_by, True, 1, 1)[: args.updates + 5]
    batches = list(iterate_batches(src, tgt, order))
    bf16 = packed.native_bf16()

    def update(b) -> None:
        opt.zero_grad(set_to_none=True)
        with packed.bf16_products(bf16):
            loss = type(model).token_loss(model, b.src, b.src_lengths, b.tgt_in, b.tgt_out, 0.1)
            (loss / b.target_tokens).backward()
        opt.step()

    for b in batches[:5]:
        update(b)
    start = time.process_time()
    for b in batches[5:]:
        update(b)
    measured = max(len(batches) - 5, 1)
    result = {"cpu_s": (time.process_time() - start) / measured, "bf16": bf16}
    if args.flops:  # after the timing: the counter's dispatch would slow the updates it counts
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            for b in batches[5:]:
                update(b)
        result["product_gflop"] = counter.get_total_flops() / measured / 1e9
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a peer_race.py data folder (train.{en,es}, spm.{en,es}.model)")
    ap.add_argument("--variants", default="standard,window-add-seg,window-add-seg+paper")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lines", type=int, default=8000, help="training pairs read (batches are drawn from these)")
    ap.add_argument("--checkouts", default=".", help="comma-separated attnmt checkouts to compare")
    ap.add_argument("--flops", action="store_true",
                    help="also count the products' floating-point operations of an update (the same "
                    "batches for every variant: no machine noise), once per variant")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    variants = args.variants.split(",")
    if variants[0] != "standard":
        variants.insert(0, "standard")
    jobs = [(c, v) for c in checkout_dirs(args.checkouts) for v in variants]

    def command(variant: str, r: int) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--data", str(Path(args.data).resolve()),
                "--worker", variant, "--updates", str(args.updates), "--hidden", str(args.hidden),
                "--lines", str(args.lines)] + (["--flops"] if args.flops and r == 0 else [])

    replies = run_rounds(jobs, args.rounds, command, "variant_updates")
    times = {job: [reply["cpu_s"] for reply in got] for job, got in replies.items()}
    flops = {job: reply["product_gflop"] for job, got in replies.items() for reply in got if "product_gflop" in reply}
    rows = []
    for checkout, variant in jobs:
        own, base = times[(checkout, variant)], times[(checkout, "standard")]
        rows.append({"checkout": checkout, "variant": variant, "cpu_s": [round(t, 4) for t in own],
                     "cpu_s_median": round(statistics.median(own), 4),
                     "ratio_paired": round(statistics.median(a / b for a, b in zip(own, base)), 3)})
        if args.flops:
            gflop = flops[(checkout, variant)]
            rows[-1].update(product_gflop=round(gflop, 2),
                            product_ratio=round(gflop / flops[(checkout, "standard")], 3))
    print(json.dumps({"benchmark": "variant_updates", "hidden": args.hidden, "updates": args.updates,
                      "rounds": args.rounds, "rows": rows}))
    print("summary: " + "; ".join(f"{Path(r['checkout']).name} {r['variant']} {r['cpu_s_median']:.3f} s "
                                  f"({r['ratio_paired']:.2f}x" + (f", products {r['product_ratio']:.2f}x"
                                                                  if args.flops else "") + ")" for r in rows))


if __name__ == "__main__":
    main()
