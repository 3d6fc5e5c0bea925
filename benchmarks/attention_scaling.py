"""How attention cost grows with the source length S: global vs local-m vs local-p.

For every S in --sizes, at fixed batch B, size d, target block T and window D, measures

    step_attn   one decoder step (T = 1, no grad), attention only
    step_full   ... attention + the attentional layer h̃_t = tanh(W_c[c_t; h_t])
    tf_attn     teacher-forced forward + backward of T target steps in one call (the decoder
                without input feeding), attention only
    tf_full     ... attention + attentional layer
    feed_full   the same T steps one call each, then backward (the decoder with input feeding,
                as in training with input_feed: true), attention + attentional layer
    model_step  one step of the whole Seq2Seq decoder (2 LSTM layers of d, input feeding,
                attention, attentional layer, output layer over --vocab words), no grad
    decode      real decoding: greedy and beam search (--beams) of that model over a pre-encoded
                source, --decode-steps output words per sentence (</s> is never chosen), at each
                batch size of --decode-batches; reported per output word (search time / words
                produced, a beam hypothesis's step counting as 1/K of a word) and per step, with
                the once-per-source attention.prepare() time (not in the per-word time).
                One decoder runs every kind's search, its attention module swapped in (the
                rest of the step is the same tensors), and a second global module is timed
                as a control: "control" global ÷ global-again is what two identical searches
                differ by on this machine

(prepare() is inside the tf/feed measures, so global-general's W_a h̄_s is part of its cost.)
Time: the fastest of several runs, in ms, of the calling thread's CPU time on CPU (with one
thread the ops run on it; CPU time, unlike wall time, does not count waiting for a core on a
shared machine) or of synchronised wall time on CUDA; the kinds are timed round-robin so that
load changes hit them alike. Memory: the peak allocated during one call above what was live
before it, in MB (CPU: allocator events from torch.profiler; CUDA: max_memory_allocated).
Ratios global/local come from the same run. With --paired ROUNDS the decode rows are timed
instead in ROUNDS rounds of one search per kind, back to back, and a decode ratio is the median
over rounds of global's time / local's time in the same round (its quartiles beside it): on a
shared machine whose speed drifts by more than the 2-5 % a batch-1 row differs by, the fastest
runs of two kinds may come from different quiet moments, paired rounds do not. Prints one JSON
line, then a one-line summary that ends with issue 16's goals (local per-word time <= global's
in every decode row; at S = 4000 a whole decoder step >= 2x faster and <= 0.3x global's memory
per attention step).

    python benchmarks/attention_scaling.py                        # CPU, 1 thread
    python benchmarks/attention_scaling.py --sizes 200,1000,4000 --measures decode --paired 60
    python benchmarks/attention_scaling.py --device cuda --threads 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from attnmt.attention import GlobalAttention, LocalAttention
from attnmt.config import ModelConfig
from attnmt.models.seq2seq import Seq2Seq

KINDS = ("global", "local-m", "local-p")
MEASURES = ("step_attn", "step_full", "tf_attn", "tf_full", "feed_full", "model_step")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fastest_ms(fns: dict, device: torch.device, min_time: float, min_reps: int = 3) -> dict:
    """The fastest run of each function, timing them round-robin."""
    clock = time.perf_counter if device.type == "cuda" else time.thread_time
    for fn in fns.values():  # warm-up
        fn()
    sync(device)
    best = {k: float("inf") for k in fns}
    reps, start = 0, time.perf_counter()
    while reps < min_reps or (time.perf_counter() - start < min_time and reps < 100):
        for k, fn in fns.items():
            t0 = clock()
            fn()
            sync(device)
            best[k] = min(best[k], (clock() - t0) * 1e3)
        reps += 1
    return best


def peak_mb(fn, device: torch.device) -> float:
    """Peak bytes allocated while fn runs, above what was allocated before it."""
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        sync(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak / 2**20


def build(kind: str, score: str, d: int, window: int) -> nn.Module:
    torch.manual_seed(0)
    if kind == "global":
        return GlobalAttention(score, d, d)
    return LocalAttention(kind, score, d, d, window=window)


def workloads(kind: str, S: int, args, device: torch.device) -> dict:
    """The measured calls for one attention kind at source length S."""
    B, d, T = args.batch, args.dim, args.tgt
    score = args.global_score if kind == "global" else args.score
    att = build(kind, score, d, args.window).to(device)
    W_c = nn.Linear(2 * d, d, bias=False).to(device)
    params = list(att.parameters()) + list(W_c.parameters())
    g = torch.Generator().manual_seed(S)
    values = torch.randn(B, S, d, generator=g).to(device).requires_grad_()
    mask = torch.ones(B, S, dtype=torch.bool, device=device)
    q_step = torch.randn(B, 1, d, generator=g).to(device)
    q_tf = torch.randn(B, T, d, generator=g).to(device).requires_grad_()
    grad_out = torch.randn(B, T, d, generator=g).to(device)
    with torch.no_grad():
        memory = att.prepare(values, mask)
    pos_step = torch.tensor([min(S // 2, T)], device=device)  # any t; local-m centres on it
    pos_tf = torch.arange(T, device=device)

    def attentional(context, h):
        return torch.tanh(W_c(torch.cat([context, h], dim=-1)))  # h̃_t = tanh(W_c[c_t; h_t])

    def zero_grads():
        values.grad = q_tf.grad = None
        for p in params:
            p.grad = None

    @torch.no_grad()
    def step_attn():
        return att(q_step, memory, pos_step, need_weights=False)[0]

    @torch.no_grad()
    def step_full():
        return attentional(att(q_step, memory, pos_step, need_weights=False)[0], q_step)

    def tf(full: bool):
        def run():
            zero_grads()
            context = att(q_tf, att.prepare(values, mask), pos_tf, need_weights=False)[0]
            (attentional(context, q_tf) if full else context).backward(grad_out)

        return run

    def feed_full():
        zero_grads()
        mem = att.prepare(values, mask)
        outs = []
        for t in range(T):
            h = q_tf[:, t : t + 1]
            outs.append(attentional(att(h, mem, pos_tf[t : t + 1], need_weights=False)[0], h))
        torch.cat(outs, 1).backward(grad_out)

    fns = {"step_attn": step_attn, "step_full": step_full, "tf_attn": tf(False)}
    fns.update(tf_full=tf(True), feed_full=feed_full)
    if "model_step" in args.measures:
        cfg = ModelConfig(
            layers=2, hidden=d, embed=d, attention=kind, score=score, input_feed=True,
            dropout=0.0, window=args.window,
        )  # fmt: skip
        torch.manual_seed(0)
        model = Seq2Seq(cfg, 100, args.vocab).to(device).eval()
        enc = {
            "memory": model.decoder.attention.prepare(values.detach(), mask),
            "h": torch.zeros(B, 2, d, device=device),
            "c": torch.zeros(B, 2, d, device=device),
        }
        state = model.init_state(enc)
        prefix = torch.full((B, 1 + int(pos_step)), 4, device=device)
        fns["model_step"] = torch.no_grad()(lambda: model.step(prefix, state, enc))
    return {m: fns[m] for m in args.measures}


class PreEncoded:
    """A Seq2Seq whose encode() returns a fixed encoder output: the search's time is decoding."""

    def __init__(self, model, enc):
        self.model, self.enc = model, enc

    def encode(self, src, src_lengths):
        return self.enc

    def init_state(self, enc):
        return self.model.init_state(enc)

    def step(self, prefix, state, enc, need_weights=False):
        return self.model.step(prefix, state, enc, need_weights)


def decode_workloads(S: int, B: int, args, device: torch.device) -> dict:
    """{kind: {"prepare": call, beam: search call}} for source length S and batch B, the kinds of
    KINDS and "global-again" (global once more, a control: global ÷ global-again is what two
    identical searches differ by). One Seq2Seq decodes for every kind, its attention module
    swapped in before each search: the LSTM layers, W_c, the output layer and their packed
    copies are the same tensors, so the searches differ in their attention only. (With a model
    per kind, the same computation on other copies of the 8 MB output layer and the LSTM
    weights differed by up to 7 % between instances on an AMD EPYC, from where the copies lie
    in memory: more than a batch-1 row differs by.)"""
    from attnmt.attention import build_attention
    from attnmt.data.vocab import EOS
    from attnmt.decode.search import beam_search, greedy_search

    d = args.dim
    config = lambda kind, score: ModelConfig(layers=2, hidden=d, embed=d, attention=kind,
                                             score=score, input_feed=True, dropout=0.0,
                                             window=args.window)
    torch.manual_seed(0)
    model = Seq2Seq(config("global", args.global_score), 100, args.vocab).to(device).eval()
    with torch.no_grad():
        model.decoder.W_s.bias[EOS] = -1e9  # every hypothesis runs the full --decode-steps
    g = torch.Generator().manual_seed(S)
    values = torch.randn(B, S, d, generator=g).to(device)
    mask = torch.ones(B, S, dtype=torch.bool, device=device)
    h, c = (torch.randn(B, 2, d, generator=g).to(device) for _ in range(2))
    src = torch.zeros(B, 1, dtype=torch.long, device=device)
    lengths = torch.full((B,), S, dtype=torch.long)
    n = args.decode_steps
    limits = dict(max_len_ratio=0.0, max_len_extra=n, max_len_cap=n)
    loads = {}
    for kind in (*KINDS, "global-again"):
        attention_kind = "global" if kind == "global-again" else kind
        score = args.global_score if attention_kind == "global" else args.score
        torch.manual_seed(1)
        attention = build_attention(config(attention_kind, score), d, d).to(device).eval()
        with torch.no_grad():
            enc = {"memory": attention.prepare(values, mask), "h": h, "c": c}
        wrapped = PreEncoded(model, enc)

        def search(beam: int, attention=attention, wrapped=wrapped):
            model.decoder.attention = attention
            if beam == 1:
                return greedy_search(wrapped, src, lengths, **limits)
            return beam_search(wrapped, src, lengths, beam, **limits)

        calls = {"prepare": lambda attention=attention: attention.prepare(values, mask)}
        calls.update({beam: lambda beam=beam, search=search: search(beam) for beam in args.beams})
        loads[kind] = calls
    return loads


def paired_ms(fns: dict, device: torch.device, rounds: int) -> dict:
    """Every function's time in each of ``rounds`` rounds (lists, ms); a round runs each once,
    back to back, in an order that rotates, so neighbouring calls share the machine's state."""
    clock = time.perf_counter if device.type == "cuda" else time.thread_time
    for fn in fns.values():  # warm-up
        fn()
    sync(device)
    times = {k: [] for k in fns}
    kinds = list(fns)
    for r in range(rounds):
        for k in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
            t0 = clock()
            fns[k]()
            sync(device)
            times[k].append((clock() - t0) * 1e3)
    return times


def quartiles(x: list[float]) -> list[float]:
    x = sorted(x)
    return [round(x[len(x) // 4], 3), round(statistics.median(x), 3), round(x[3 * len(x) // 4], 3)]


def decode_rows(sizes, args, device) -> tuple[list[dict], dict, list[dict]]:
    """The decode rows; with --paired ROUNDS, the quartiles of each round's global/local
    time ratio per (S, batch, beam, local kind); and the control per (S, batch, beam): global's
    time ÷ global-again's (quartiles with --paired)."""
    rows, paired, control = [], {}, []
    for S in sizes:
        for B in args.decode_batches:
            loads = decode_workloads(S, B, args, device)
            with torch.no_grad():
                prepare = fastest_ms({k: loads[k]["prepare"] for k in KINDS}, device, 0.0)
            for beam in args.beams:
                calls = {k: loads[k][beam] for k in (*KINDS, "global-again")}
                if args.paired:
                    times = paired_ms(calls, device, args.paired)
                    best = {k: min(v) for k, v in times.items()}
                    for local in (*KINDS[1:], "global-again"):
                        ratios = [g / l for g, l in zip(times["global"], times[local])]
                        paired[(S, B, beam, local)] = quartiles(ratios)
                else:
                    best = fastest_ms(calls, device, args.min_time, min_reps=2)
                control.append({"S": S, "batch": B, "beam": beam, "global_over_global_again":
                                 paired.get((S, B, beam, "global-again"),
                                            round(best["global"] / best["global-again"], 3))})
                words = B * args.decode_steps
                for kind in KINDS:
                    rows.append({"S": S, "kind": kind, "batch": B, "beam": beam,
                                 "step_ms": round(best[kind] / args.decode_steps, 4),
                                 "word_ms": round(best[kind] / words, 4),
                                 "prepare_ms": round(prepare[kind], 4)})
            del loads
    return rows, paired, control


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,1000,4000,16000")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--tgt", type=int, default=50, help="target steps T of tf and feed")
    parser.add_argument("--window", type=int, default=10, help="D")
    parser.add_argument("--vocab", type=int, default=8000, help="target words of model_step")
    parser.add_argument("--score", default="general", help="local attention's score")
    parser.add_argument("--global-score", default=None, help="global's score (default: --score)")
    parser.add_argument("--measures", default=",".join(MEASURES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads, 0 = torch default")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per measure and S")
    parser.add_argument("--decode-batches", default="1,32", help="batch sizes of the decode rows")
    parser.add_argument("--beams", default="1,5", help="beam sizes of the decode rows (1: greedy)")
    parser.add_argument("--decode-steps", type=int, default=16, help="output words per sentence")
    parser.add_argument("--paired", type=int, default=0, metavar="ROUNDS",
                        help="decode rows: time ROUNDS interleaved rounds and compare kinds by "
                             "the median of the per-round ratios (default: fastest of each)")
    args = parser.parse_args()
    args.global_score = args.global_score or args.score
    args.measures = args.measures.split(",")
    args.decode_batches = [int(b) for b in args.decode_batches.split(",")]
    args.beams = [int(b) for b in args.beams.split(",")]
    decode = "decode" in args.measures
    args.measures = [m for m in args.measures if m != "decode"]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [int(s) for s in args.sizes.split(",")]

    rows = []
    for S in sizes if args.measures else []:
        loads = {kind: workloads(kind, S, args, device) for kind in KINDS}
        by_kind = {kind: {"S": S, "kind": kind} for kind in KINDS}
        for m in args.measures:
            best = fastest_ms({kind: loads[kind][m] for kind in KINDS}, device, args.min_time)
            for kind in KINDS:
                by_kind[kind][f"{m}_ms"] = round(best[kind], 4)
                by_kind[kind][f"{m}_mb"] = round(peak_mb(loads[kind][m], device), 3)
        rows += by_kind.values()
        del loads
    by = {(r["S"], r["kind"]): r for r in rows}
    ratios = []
    for S in sizes if args.measures else []:
        for local in KINDS[1:]:
            ratio = {"S": S, "local": local}
            for m in args.measures:
                for unit in ("ms", "mb"):
                    key = f"{m}_{unit}"
                    ratio[key] = round(by[(S, "global")][key] / max(by[(S, local)][key], 1e-9), 2)
            ratios.append(ratio)
    decoded, paired, control = decode_rows(sizes, args, device) if decode else ([], {}, [])
    dec = {(r["S"], r["batch"], r["beam"], r["kind"]): r for r in decoded}
    decode_ratios = [
        {"S": S, "batch": B, "beam": K, "local": local,
         "word_ms": round(r["word_ms"] / max(dec[(S, B, K, local)]["word_ms"], 1e-9), 2)}
        for (S, B, K, kind), r in dec.items() if kind == "global" for local in KINDS[1:]
    ]
    for r in decode_ratios:  # --paired: the median round's ratio decides, quartiles beside it
        if (r["S"], r["batch"], r["beam"], r["local"]) in paired:
            r["fastest_word_ms"] = r["word_ms"]
            r["paired_quartiles"] = paired[(r["S"], r["batch"], r["beam"], r["local"])]
            r["word_ms"] = r["paired_quartiles"][1]
    goals = issue16_goals(ratios, decode_ratios)
    config = {k: getattr(args, k) for k in ("batch", "dim", "tgt", "window", "score", "vocab")}
    config.update(global_score=args.global_score, device=str(device))
    config.update(threads=torch.get_num_threads(), torch=torch.__version__)
    if decode:
        config.update(decode_steps=args.decode_steps, paired_rounds=args.paired)
    print(json.dumps({"benchmark": "attention_scaling", **config, "rows": rows, "ratios": ratios,
                      "decode": decoded, "decode_ratios": decode_ratios, "decode_control": control,
                      "goals": goals}))

    # summary: global/local-p at the largest S <= 4000 (the goal's reference point), and how
    # local-p's first measure moves from the smallest to the largest S
    ref = max((S for S in sizes if S <= 4000), default=sizes[-1])
    parts = []
    if args.measures:
        r = next(x for x in ratios if x["S"] == ref and x["local"] == "local-p")
        parts = [f"S={ref} global/local-p:"]
        parts += [f"{m} {r[m + '_ms']}x time {r[m + '_mb']}x mem;" for m in args.measures]
        m0, lo, hi = args.measures[0], sizes[0], sizes[-1]
        parts.append(
            f"{m0} ms S={lo}->{hi}: local-p {by[(lo, 'local-p')][m0 + '_ms']}->"
            f"{by[(hi, 'local-p')][m0 + '_ms']}, global {by[(lo, 'global')][m0 + '_ms']}->"
            f"{by[(hi, 'global')][m0 + '_ms']}"
        )
    for r in decode_ratios:
        spread = (f" (quartiles {r['paired_quartiles'][0]}-{r['paired_quartiles'][2]})"
                  if "paired_quartiles" in r else "")
        parts.append(f"decode S={r['S']} B={r['batch']} beam={r['beam']} "
                     f"global/{r['local']} {r['word_ms']}x per word{spread};")
    for r in control:
        parts.append(f"control S={r['S']} B={r['batch']} beam={r['beam']} global/global-again "
                     f"{r['global_over_global_again']};")
    for name, goal in goals.items():
        parts.append(f"goal {name}: {'met' if goal['met'] else 'NOT met'} ({goal['detail']});")
    print(" ".join(parts))


def issue16_goals(ratios: list[dict], decode_ratios: list[dict]) -> dict:
    """Issue 16's goals, for the rows this run measured: per output word local <= global in every
    decode row with 200 <= S <= 4000; at S = 4000 a whole decoder step (model_step) >= 2x faster and an attention step
    (step_attn) with <= 0.3x global's memory, for both local kinds."""
    goals = {}
    decode_ratios = [r for r in decode_ratios if 200 <= r["S"] <= 4000]  # the goal's range
    if decode_ratios:
        slower = [r for r in decode_ratios if r["word_ms"] < 1]
        detail = ", ".join(f"S={r['S']} B={r['batch']} beam={r['beam']} {r['local']} "
                           f"{r['word_ms']}x" for r in slower) or f"{len(decode_ratios)} rows"
        goals["local_word_time_le_global"] = {"met": not slower, "detail": detail}
    at_4000 = [r for r in ratios if r["S"] == 4000]
    checks = (("model_step_ms", 2.0, "model_step_4000_ge_2x"),
              ("step_attn_mb", 1 / 0.3, "step_attn_memory_4000_le_0.3x"))
    for key, least, name in checks:
        if at_4000 and key in at_4000[0]:
            goals[name] = {"met": all(r[key] >= least for r in at_4000),
                           "detail": ", ".join(f"{r['local']} {r[key]}x" for r in at_4000)}
    return goals


if __name__ == "__main__":
    main()
