"""Training updates per second of the race model on real batches, one fresh process per run.

A tool for checking that a training-speed change is real before racing it, in the way the race
measures: separate processes (never two variants alternated inside one process: a variant can
leave the process slower or faster for whatever runs after it), several runs each, the machine
otherwise idle. Each run builds the race's model (``configs/race-lstm.yaml``, ``model.hidden``
from ``--hidden``), reads the race's prepared data folder (``OUT/data`` of
``benchmarks/peer_race.py``: ``train.{en,es}`` and ``spm.{en,es}.model``), makes the trainer's
64-sentence length-bucketed batches, and times ``--updates`` updates after 3 warm-up ones:
``Seq2Seq.token_loss``, backward (as ``train.row_groups`` = ``--row-groups`` says: 0 auto, 1 one
pass, n groups of rows on threads), gradient-norm clipping (5), fused Adam, as Trainer.train_step
does for a plain Seq2Seq. Target pieces (</s> included, padding not) per second.

    python benchmarks/train_updates.py --data runs/peer_race/data --hidden 512 --runs 3
    python benchmarks/train_updates.py --data runs/peer_race/data --hidden 512 --runs 3 --row-groups 1
    python benchmarks/train_updates.py --data runs/peer_race/data --hidden 512 --runs 1 --processes 2 --profile
    PYTHONPATH=/path/to/other/checkout python benchmarks/train_updates.py ...   # the other variant

Prints one JSON line per run and a one-line summary (median, min, max).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(data: Path, hidden: int, updates: int, threads: int, sentences: int, row_groups: int,
            processes: int = 1, profile: bool = False, bf16: bool = False) -> dict:
    import sentencepiece as spm
    import torch

    import attnmt
    from attnmt.config import load_config
    from attnmt.data.batching import filter_by_length, iterate_batches, make_batches
    from attnmt.data.vocab import SPECIALS
    from attnmt.kernels.packed import native_bf16, set_bf16_products
    from attnmt.models.seq2seq import Seq2Seq
    from attnmt.train.row_groups import grouped_backward, groups_for
    from attnmt.train.row_processes import RowProcesses

    torch.set_num_threads(threads)
    if bf16 and not native_bf16():
        raise SystemExit("train_updates: --bf16: this CPU has no native bfloat16 products")
    set_bf16_products(bf16)  # as the trainer's train.amp on such a CPU
    cfg = load_config(str(ROOT / "configs" / "race-lstm.yaml"))
    cfg.model.hidden = hidden
    ids = {}
    for lang in ("en", "es"):
        sp = spm.SentencePieceProcessor(model_file=str(data / f"spm.{lang}.model"))
        lines = (data / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:sentences]
        ids[lang] = [[t + len(SPECIALS) for t in sp.encode(line)] for line in lines]
    src, tgt, _ = filter_by_length(ids["en"], ids["es"], cfg.data.max_len)
    vocab = 8000 + len(SPECIALS)
    torch.manual_seed(0)
    model = Seq2Seq(cfg.model, vocab, vocab, cfg.train.init_uniform).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9, fused=True)
    batches = list(iterate_batches(src, tgt, make_batches(src, tgt, 64, seed=1)[: updates + 3]))

    smoothing = cfg.train.label_smoothing
    workers = RowProcesses(model, processes - 1) if processes > 1 else None

    def update(b) -> int:
        opt.zero_grad(set_to_none=True)
        if workers is not None:
            workers.backward(b, 1.0 / b.target_tokens, smoothing)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip)
            opt.step()
            return b.target_tokens
        groups = groups_for(row_groups, b.src.size(0), torch.get_num_threads(), hidden)
        if groups > 1:
            grouped_backward(model, b, groups, 1.0 / b.target_tokens, smoothing)
        else:
            loss = Seq2Seq.token_loss(model, b.src, b.src_lengths, b.tgt_in, b.tgt_out, smoothing)
            (loss / b.target_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip)
        opt.step()
        return b.target_tokens

    for b in batches[:3]:
        update(b)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
    if profiler is not None:
        profiler.start()
    start, pieces = time.perf_counter(), 0
    for b in batches[3:]:
        pieces += update(b)
    took = time.perf_counter() - start
    shares = None
    if profiler is not None:
        profiler.stop()
        shares = time_shares(profiler.key_averages())
    if workers is not None:
        workers.close()
    return {"hidden": hidden, "threads": threads, "row_groups": row_groups, "processes": processes, "bf16": bf16, "updates": len(batches) - 3, "tgt_tok_s": round(pieces / took, 1),
            "s_per_update": round(took / (len(batches) - 3), 4), "attnmt": str(Path(attnmt.__file__).parent),
            **({"profile": shares} if shares is not None else {})}


def time_shares(events) -> dict:
    """Shares of this process's operator time (self CPU): the per-step products on packed
    weights (oneDNN linear), the large products (mm/addmm: input projections of all steps, weight
    gradients, the output layer), and the rest (element-wise gates, attention, copies, optimizer)."""
    total = sum(e.self_cpu_time_total for e in events)
    step = sum(e.self_cpu_time_total for e in events if e.key.startswith("mkldnn::_linear_pointwise"))
    large = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm"))
    return {"step_products": round(step / total, 3), "large_products": round(large / total, 3),
            "other": round((total - step - large) / total, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the race's prepared data folder (peer_race.py OUT/data)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--updates", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--row-groups", type=int, default=0, help="train.row_groups (0 auto, 1 off)")
    ap.add_argument("--processes", type=int, default=1, help="rows split over this many processes (train/row_processes.py)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 products (train.amp on a CPU with bfloat16 units)")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes, one after the other")
    ap.add_argument("--sentences", type=int, default=12000, help="first N training pairs to batch")
    ap.add_argument("--profile", action="store_true", help="also the trainer process's operator time by kind (torch.profiler; slows the run)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    data = Path(args.data)
    for name in ("train.en", "train.es", "spm.en.model", "spm.es.model"):
        if not (data / name).is_file():
            print(f"train_updates: {data / name}: missing (run benchmarks/peer_race.py first)", file=sys.stderr)
            sys.exit(2)
    if args.child:
        print(json.dumps(one_run(data, args.hidden, args.updates, args.threads, args.sentences, args.row_groups,
                                    args.processes, args.profile, args.bf16)))
        return
    rates = []
    for _ in range(args.runs):
        cmd = [sys.executable, __file__, "--child"] + sys.argv[1:]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr.strip()[-500:], file=sys.stderr)
            sys.exit(out.returncode)
        record = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(record), flush=True)
        rates.append(record["tgt_tok_s"])
    print(f"hidden {args.hidden}, {args.threads} threads, row_groups {args.row_groups}, processes {args.processes}, "
          f"bf16 {args.bf16}, {args.runs} runs: median {statistics.median(rates):.0f} "
          f"target pieces/s (min {min(rates):.0f}, max {max(rates):.0f})")


if __name__ == "__main__":
    main()
