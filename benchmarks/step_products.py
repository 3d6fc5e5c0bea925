"""GFLOP/s of the per-step matrix products of CPU training, by kernel (issue 13's 512 gap).

A tool for judging a training-speed lever, not a claim (the claim is ``benchmarks/peer_race.py``).
With row processes each process runs its 32 rows of a batch on one thread, so every LSTM step
multiplies a (32, K) block by a weight it has already seen. This times those products, one thread,
for the race model (``--hidden`` H, embeddings E = 256, 2 layers, input feeding; fused_rnn.py):

    encoder step       (M, H)  · W_hhᵀ (H → 4H)          backward (M, 4H) · W_hh (4H → H)
    decoder layer 1    (M, 2H) · [W_feed | W_hh]ᵀ          backward (M, 4H) · W (4H → 2H)
    decoder layer 2    (M, 2H) · [W_ih | W_hh]ᵀ            backward (M, 4H) · W (4H → 2H)
    W_c                (M, 2H) · W_cᵀ (2H → H)             backward (M, H) · W_c (H → 2H)

with three kernels: ``packed`` (oneDNN with the weight re-laid out once, what training uses;
kernels/packed.py), ``addmm`` (x Wᵀ on the plain weight), ``transposed`` (W xᵀ: the rows as the
product's columns). Each shape: the best of ``--repeats`` timings of ``--calls`` calls. Then the
whole step mix (all shapes in turn, as a step does) per kernel.

    python benchmarks/step_products.py --hidden 512 --rows 32
    python benchmarks/step_products.py --hidden 512 --rows 64      # one process with all 64 rows

Prints one JSON line per shape and kernel, then a one-line summary of the mix.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def shapes(hidden: int) -> list[tuple[str, int, int]]:
    """(name, K, N) of every per-step product y = x Wᵀ, x (M, K), W (N, K)."""
    H = hidden
    return [("encoder", H, 4 * H), ("encoder backward", 4 * H, H),
            ("decoder layer 1", 2 * H, 4 * H), ("decoder layer 1 backward", 4 * H, 2 * H),
            ("decoder layer 2", 2 * H, 4 * H), ("decoder layer 2 backward", 4 * H, 2 * H),
            ("W_c", 2 * H, H), ("W_c backward", H, 2 * H)]


def kernels(rows: int, K: int, N: int) -> dict:
    """Zero-argument functions computing the product with each kernel (same inputs)."""
    x, w = torch.randn(rows, K), torch.randn(N, K)
    x_t, out_t = x.t().contiguous(), torch.empty(N, rows)
    made = {"addmm": lambda: torch.mm(x, w.t()), "transposed": lambda: torch.mm(w, x_t, out=out_t)}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        packed = torch.ops.mkldnn._reorder_linear_weight(w, rows)
        made["packed"] = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    return made


def best_time(fn, calls: int, repeats: int) -> float:
    for _ in range(max(calls // 10, 3)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--rows", type=int, default=32, help="rows per product (32: one of two row processes)")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    mix: dict[str, list] = {}
    for name, K, N in shapes(args.hidden):
        gflop = 2 * args.rows * K * N / 1e9
        for kernel, fn in kernels(args.rows, K, N).items():
            seconds = best_time(fn, args.calls, args.repeats)
            mix.setdefault(kernel, []).append(fn)
            print(json.dumps({"product": name, "rows": args.rows, "K": K, "N": N, "kernel": kernel,
                              "us": round(seconds * 1e6, 1), "gflop_s": round(gflop / seconds, 1)}), flush=True)
    total = sum(2 * args.rows * K * N for _, K, N in shapes(args.hidden)) / 1e9
    rates = {}
    for kernel, fns in mix.items():
        seconds = best_time(lambda fns=fns: [f() for f in fns], max(args.calls // 4, 10), args.repeats)
        rates[kernel] = round(total / seconds, 1)
    print(json.dumps({"mix": rates, "hidden": args.hidden, "rows": args.rows, "threads": 1}))
    print(f"hidden {args.hidden}, {args.rows} rows, 1 thread, one step's products in turn: "
          + ", ".join(f"{k} {v} GFLOP/s" for k, v in rates.items()))


if __name__ == "__main__":
    main()
