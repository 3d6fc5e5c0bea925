"""CPU time of the window's soft mask, forward and backward, per mask kind, for one or more
checkouts of attnmt (a before and after).

    python benchmarks/window_mask.py [--shape 50,4,40,40] [--rounds 7] [--repeats 20] [--checkouts DIR,DIR]

The mask is ``attention/window.py``'s ``window_mask`` of both pointers φ̂ (B, H, 2, T, S) (random
softmaxes, float32), its backward given a random gradient (B, H, T, S): token masks ("exact",
"sum") and segment masks ("exact" with b = 3, the default window-add-seg; "sum" with b = 5, the
authors' preset). Each checkout runs in a process of its own (its own ``attnmt``), one thread;
a round times every kind ``--repeats`` times in each checkout, rounds alternate the checkouts'
order, and a kind's time is its median round. ``--shape``: B, H, T, S (the default: a race batch
of ~2,000 target tokens at d 256, 4 heads).

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

KINDS = ((0, "exact"), (0, "sum"), (3, "exact"), (5, "sum"))  # (segment size, mask)


def worker(args) -> None:
    """One round of every kind in this process (run with the checkout as the working directory)."""
    sys.path.insert(0, os.getcwd())
    import torch

    from attnmt.attention.window import window_mask
    from attnmt.train.allocator import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(1)
    B, H, T, S = (int(n) for n in args.shape.split(","))
    g = torch.Generator().manual_seed(0)
    phi = torch.softmax(torch.randn(B, H, 2, T, S, generator=g) * 3, -1).requires_grad_()
    grad = torch.randn(B, H, T, S, generator=g)
    times = {}
    for segment, mask in KINDS:
        def step() -> None:
            window_mask(phi, segment, mask).backward(grad)

        for _ in range(3):
            step()
        start = time.process_time()
        for _ in range(args.repeats):
            step()
        times[f"{mask}/{segment}"] = (time.process_time() - start) / args.repeats * 1000
    print(json.dumps(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="50,4,40,40", help="B,H,T,S")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--checkouts", default=".", help="comma-separated attnmt checkouts to compare")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--shape", args.shape,
               "--repeats", str(args.repeats)]
    replies = run_rounds([(c, "masks") for c in checkout_dirs(args.checkouts)], args.rounds,
                         lambda name, r: command, "window_mask")
    times = {(c, kind): [reply[kind] for reply in got] for (c, _), got in replies.items() for kind in got[0]}
    rows = [{"checkout": c, "kind": kind, "ms": [round(t, 3) for t in ts], "ms_median": round(statistics.median(ts), 3)}
            for (c, kind), ts in times.items()]
    print(json.dumps({"benchmark": "window_mask", "shape": args.shape, "rounds": args.rounds,
                      "repeats": args.repeats, "rows": rows}))
    print("summary: " + "; ".join(f"{Path(r['checkout']).name} {r['kind']} {r['ms_median']:.2f} ms" for r in rows))


if __name__ == "__main__":
    main()
