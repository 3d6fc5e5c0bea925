"""Step time and memory of each attention variant relative to standard attention, in one run.

    python benchmarks/window_attention.py [--layers 3 --hidden 256 --heads 4 --ff 1024]
        [--batch 32 --len 40 --vocab 8000 --repeats 5 --placement reference|all] [--device cpu]
        [--as-trainer]

One training step = forward + backward of the Transformer on a random (B, len) batch. Variants run
interleaved (round robin, ``repeats`` rounds) so that load from other processes hits all of them
alike; the time per variant is its fastest round (the least disturbed). On CPU the time is the
process's CPU time (time.process_time, with --threads 1), which other processes on a shared
machine barely disturb; on CUDA it is synchronised wall-clock time. Memory is the bytes of
distinct tensor storages autograd saves for backward (the activation memory of a step,
measured with saved_tensors_hooks: exact and independent of machine load), plus CUDA peak memory on a GPU.

placement "reference": the paper's best setting — the variant in encoder self-attention and
cross-attention of the lower 3 layers, standard decoder self-attention (relative: encoder only).
placement "all": the variant in every attention of every layer (worst case). A variant named
"NAME+paper" is NAME with the authors' preset (``model.window_preset: paper``), e.g.
``window-add-seg+paper``.

``--as-trainer``: the step as ``attnmt train`` takes it on a CPU, so that the ratio is the
trainer's: the model's own loss (``token_loss``: the output layer and the label-smoothed loss
fused, smoothing 0.1), torch's fused Adam, and bfloat16 products (``train.amp``) where the CPU
multiplies bfloat16 natively. Without it: a plain cross-entropy on full logits and per-tensor
Adam in float32 (the rows measured before 2026-12-05), whose fixed costs dilute the ratio.

Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from attnmt.attention.window import PRESETS
from attnmt.config import Config, ModelConfig
from attnmt.kernels import packed
from attnmt.models import build_model

VARIANTS = ["standard", "relative", "localness", "window-mul", "window-add", "window-mul-seg", "window-add-seg"]


def make_model(args, variant: str, device):
    """The Transformer with ``variant`` placed as ``args.placement`` says; "NAME+paper": NAME with
    the authors' preset (attention/window.py PRESETS["paper"], as model.window_preset: paper)."""
    variant, _, preset = variant.partition("+")
    cfg = Config(model=ModelConfig(type="transformer"))
    m = cfg.model
    for key, value in PRESETS[preset or "none"].items():
        setattr(m, key, value)
    m.layers, m.hidden, m.heads, m.ff, m.dropout = args.layers, args.hidden, args.heads, args.ff, 0.1
    m.attention_layers = min(3, args.layers) if args.placement == "reference" else 0
    m.enc_self_attention = variant
    m.cross_attention = "standard" if variant == "relative" else variant
    m.dec_self_attention = variant if args.placement == "all" else "standard"
    torch.manual_seed(0)
    return build_model(cfg, args.vocab, args.vocab).to(device)


def step(model, opt, batch, as_trainer: bool = False) -> None:
    src, lengths, tgt_in, tgt_out = batch
    opt.zero_grad(set_to_none=True)
    if as_trainer:  # the trainer's loss, summed over tokens then divided, under its CPU precision
        with packed.bf16_products(src.device.type == "cpu" and packed.native_bf16()):
            loss = type(model).token_loss(model, src, lengths, tgt_in, tgt_out, 0.1)
            (loss / tgt_out.numel()).backward()
    else:
        logits, _ = model(src, lengths, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1))
        loss.backward()
    opt.step()


def saved_bytes(model, batch) -> int:
    """Bytes of the distinct storages autograd keeps for backward (a tensor saved by two ops, or
    a view of a saved tensor, counts once)."""
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    src, lengths, tgt_in, tgt_out = batch
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, _ = model(src, lengths, tgt_in)
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1))
    return sum(seen.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--len", type=int, default=40)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--placement", choices=["reference", "all"], default="reference")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--as-trainer", action="store_true",
                   help="the trainer's step: fused loss, fused Adam, bfloat16 products where native")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    variants = args.variants.split(",")
    g = torch.Generator().manual_seed(0)
    B, n = args.batch, args.len
    batch = tuple(
        t.to(device)
        for t in (
            torch.randint(4, args.vocab, (B, n), generator=g),
            torch.full((B,), n, dtype=torch.long),
            torch.randint(4, args.vocab, (B, n), generator=g),
            torch.randint(4, args.vocab, (B, n), generator=g),
        )
    )
    models = {v: make_model(args, v, device) for v in variants}
    opts = {v: torch.optim.Adam(m.parameters(), lr=1e-4, fused=args.as_trainer or None) for v, m in models.items()}
    result: dict = {"benchmark": "window_attention", "placement": args.placement, "device": str(device),
                    "shape": {"batch": B, "len": n, "layers": args.layers, "hidden": args.hidden,
                              "heads": args.heads, "ff": args.ff, "vocab": args.vocab},
                    "threads": args.threads, "as_trainer": args.as_trainer, "variants": {}}
    for v in variants:  # warm-up and memory
        step(models[v], opts[v], batch, args.as_trainer)
        result["variants"][v] = {"params": sum(x.numel() for x in models[v].parameters()),
                                 "saved_mb": round(saved_bytes(models[v], batch) / 2**20, 2)}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start, cpu_start = time.perf_counter(), time.process_time()
            step(models[v], opts[v], batch, args.as_trainer)
            if device.type == "cuda":
                torch.cuda.synchronize()
                result["variants"][v]["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
                times[v].append(time.perf_counter() - start)
            else:  # CPU time of this process: robust to other processes sharing the cores
                times[v].append(time.process_time() - cpu_start)
    base = result["variants"]["standard"] if "standard" in variants else None
    for v in variants:
        r = result["variants"][v]
        r["step_s"] = round(min(times[v]), 4)
        r["step_s_median"] = round(sorted(times[v])[len(times[v]) // 2], 4)
        if base:
            r["time_ratio"] = round(r["step_s"] / base["step_s"], 3)
            r["memory_ratio"] = round(r["saved_mb"] / base["saved_mb"], 3)
    print(json.dumps(result))
    print("summary: " + ", ".join(
        f"{v} {r.get('time_ratio', 0):.2f}x time {r.get('memory_ratio', 0):.2f}x mem"
        for v, r in result["variants"].items()))


if __name__ == "__main__":
    main()
