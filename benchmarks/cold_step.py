"""One attention step at batch 1 where a search runs it: after the output layer, its data cold.

In a search, each decoder step streams the output layer (V × d weights, 8 MB at V = 8000,
d = 256) between two attention calls, so an attention step reads its tensors from memory, not
from cache. At batch 1 that read is most of its cost, and it decides whether local-p is cheaper
than global: global reads the source states (S × d, keys = values for a dot score), local-p
reads its d × d predictor W_p (p_t = S·σ(v_pᵀ tanh(W_p h_t))) and two windows of 2D + 1 rows.

For every S in --sizes, with the real modules (``LocalAttention`` / ``GlobalAttention``, autograd
off, a prepared memory), timed in --rounds rounds that call global, local-p and local-p's
predictor back to back, the median of

    hot      the step called again and again (its data in cache)
    cold     the step right after one output-layer product (``F.linear`` of a row with V × d)
    predictor  local-p's v_pᵀ tanh(W_p h_t) alone, hot and cold

in µs of the thread's CPU time, the median over rounds of global's cold time / local-p's, and
the bytes each step must read (float32). Prints one JSON line, then a one-line summary.

    python benchmarks/cold_step.py                       # 1 thread, S = 200, 1000, 4000
    python benchmarks/cold_step.py --sizes 200 --dim 512
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from attnmt.attention import GlobalAttention, LocalAttention


def paired_us(fns: dict, rounds: int, before=None) -> dict:
    """Each function's CPU times in µs over ``rounds`` rounds, the functions called back to back
    in a round (in alternating order), each after ``before()`` (untimed) when given."""
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 else order[::-1]:
            if before is not None:
                before()
            t0 = time.thread_time_ns()
            fns[k]()
            times[k].append((time.thread_time_ns() - t0) / 1e3)
    return times


def median(x: list[float]) -> float:
    return round(statistics.median(x), 1)


def bytes_read(kind: str, S: int, d: int, window: int, score: str) -> int:
    """Float32 bytes one batch-1 step must read: the memory for global (keys and values, one
    tensor for a dot score), W_p, v_p and the window's keys and values for local-p."""
    if kind == "global":
        return 4 * S * d * (1 if score == "dot" else 2)
    W = 2 * window + 1
    return 4 * (d * d + d + 2 * W * d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000,4000")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--window", type=int, default=10, help="D")
    parser.add_argument("--vocab", type=int, default=8000, help="rows of the output layer")
    parser.add_argument("--global-score", default="dot")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    d = args.dim
    torch.manual_seed(0)
    W_s, row = torch.randn(args.vocab, d), torch.randn(1, d)
    query = torch.randn(1, 1, d)

    def output_layer():
        F.linear(row, W_s)

    rows = []
    with torch.no_grad():
        for S in (int(s) for s in args.sizes.split(",")):
            values, mask = torch.randn(1, S, d), torch.ones(1, S, dtype=torch.bool)
            modules = {"global": GlobalAttention(args.global_score, d, d),
                       "local-p": LocalAttention("local-p", "dot", d, d, window=args.window)}
            steps = {}
            for kind, att in modules.items():
                memory = att.prepare(values, mask)
                steps[kind] = lambda att=att, memory=memory: att(query, memory, None, False)
            att = modules["local-p"]
            W_p, v_p, h = att.W_p.weight, att.v_p.weight, query.view(1, d)
            steps["predictor"] = lambda: torch.mm(torch.tanh(F.linear(h, W_p)), v_p.t())
            hot = paired_us(steps, args.rounds)
            cold = paired_us(steps, args.rounds, output_layer)
            ratio = [g / p for g, p in zip(cold["global"], cold["local-p"])]
            rows.append({"S": S, **{f"{k}_hot_us": median(hot[k]) for k in steps},
                         **{f"{k}_cold_us": median(cold[k]) for k in steps},
                         "cold_global_over_local_p": round(statistics.median(ratio), 3),
                         "global_bytes": bytes_read("global", S, d, args.window,
                                                    args.global_score),
                         "local_p_bytes": bytes_read("local-p", S, d, args.window, "dot")})
    print(json.dumps({"benchmark": "cold_step", "dim": d, "window": args.window,
                      "vocab": args.vocab, "global_score": args.global_score,
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "rows": rows}))
    parts = [f"S={r['S']}: hot/cold us global {r['global_hot_us']}/{r['global_cold_us']}"
             f" ({r['global_bytes'] >> 10} KB), local-p {r['local-p_hot_us']}/"
             f"{r['local-p_cold_us']} ({r['local_p_bytes'] >> 10} KB; its predictor "
             f"{r['predictor_hot_us']}/{r['predictor_cold_us']}), cold global/local-p "
             f"{r['cold_global_over_local_p']}x;" for r in rows]
    print(" ".join(parts))


if __name__ == "__main__":
    main()
