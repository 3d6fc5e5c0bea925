"""Training updates of the input-feeding decoder on CPU: StepLoop against the plain autograd loop.

For an attention the fused loop cannot take (local-m, local-p, concat), the decoder trains through
``fused_rnn.StepLoop`` and, for local attention, ``attention_steps.local_steps`` with ``StepLinear``
(every weight gradient one product over all steps). This times one forward + backward of the
whole Seq2Seq on random batches of the race's shapes (2 × --hidden LSTMs, 64 sentences of 20–45
source and target pieces, a 4,000-piece vocabulary per side, dropout 0.2), in --rounds rounds
that run both paths back to back in alternating order:

    steploop   today's path
    autograd   the decoder's plain step loop (``lstm_steps.steppable`` off, the query
               products of local attention as separate products), autograd summing every
               step's weight gradient

with bfloat16 products where ``train.amp`` would use them (``packed.native_bf16``). Prints one
JSON line (ms per update, the median of autograd ÷ steploop over rounds and its quartiles), then a
one-line summary.

    python benchmarks/decoder_training.py --attention local-p --score general
    python benchmarks/decoder_training.py --attention local-m --score dot --rounds 12
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from attnmt.attention.local_attention import LocalAttention
from attnmt.config import ModelConfig
from attnmt.kernels import lstm_steps, packed
from attnmt.models.seq2seq import Seq2Seq


def batches(n: int, vocab: int, seed: int = 1) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        S, T = (int(x) for x in torch.randint(20, 46, (2,), generator=g))
        src = torch.randint(4, vocab, (64, S), generator=g)
        tgt = torch.randint(4, vocab, (64, T + 1), generator=g)
        out.append((src, torch.full((64,), S), tgt[:, :-1], tgt[:, 1:]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="local-p")
    parser.add_argument("--score", default="general")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batches", type=int, default=6, help="updates per timed run")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(layers=2, hidden=args.hidden, embed=args.hidden, attention=args.attention,
                      score=args.score, input_feed=True, dropout=0.2)
    torch.manual_seed(0)
    model = Seq2Seq(cfg, 4000, 4000).train()
    data = batches(args.batches, 4000)
    paths = {"steploop": (lstm_steps.steppable, LocalAttention._query_weights),
             "autograd": (lambda self, memory: False, lambda self, keys_projected: [])}

    def run() -> None:
        for src, lengths, tgt_in, tgt_out in data:
            model.zero_grad()
            logits, _ = model(src, lengths, tgt_in)
            F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten()).backward()

    times: dict[str, list[float]] = {k: [] for k in paths}
    bf16 = packed.native_bf16()
    try:
        with packed.bf16_products(bf16):
            run()  # warm-up
            for r in range(args.rounds):
                for name in list(paths) if r % 2 else list(paths)[::-1]:
                    lstm_steps.steppable, LocalAttention._query_weights = paths[name]
                    t0 = time.perf_counter()
                    run()
                    times[name].append((time.perf_counter() - t0) * 1e3 / args.batches)
    finally:
        lstm_steps.steppable, LocalAttention._query_weights = paths["steploop"]
    ratios = sorted(a / s for a, s in zip(times["autograd"], times["steploop"]))
    result = {"benchmark": "decoder_training", "attention": args.attention, "score": args.score,
              "hidden": args.hidden, "threads": torch.get_num_threads(), "bf16_products": bf16,
              "torch": torch.__version__, "rounds": args.rounds,
              "ms_per_update": {k: round(statistics.median(v), 1) for k, v in times.items()},
              "autograd_over_steploop": round(statistics.median(ratios), 3),
              "quartiles": [round(ratios[len(ratios) // 4], 3), round(ratios[3 * len(ratios) // 4], 3)]}
    print(json.dumps(result))
    ms = result["ms_per_update"]
    print(f"{args.attention} {args.score}: {ms['steploop']} ms/update with StepLoop, "
          f"{ms['autograd']} with the autograd loop; autograd/steploop "
          f"{result['autograd_over_steploop']}x (quartiles {result['quartiles'][0]}-"
          f"{result['quartiles'][1]}, {args.rounds} paired rounds)")


if __name__ == "__main__":
    main()
