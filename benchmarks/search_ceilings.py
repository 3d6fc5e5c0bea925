"""What two untried levers could still buy the Transformer search on this CPU (issue 37): a tool
for deciding whether to build them, not a claim (the claim is ``peer_race.py`` / ``ct2_rounds.py``).

``--measure compile``: would a compiled decoder step (torch.compile, Inductor, weights frozen)
beat attnmt's eager one? Times, one thread, (a) attnmt's own search step (``--run``'s model, a
beam-5 search of 64 test sentences of about ``--words`` pieces; the median of its steps at the
full 320 rows), (b) the same step's math written plainly for the compiler (3 layers of
pre-norm self-attention over a reordered bfloat16 cache, cross-attention over the sentence's
keys, the feed-forward, the output layer and log_softmax; random weights of the run's sizes,
cache length = (a)'s median position), eager and compiled: for static shapes (the bound: a
search's cache grows at every step, so each step would compile anew) and for dynamic ones (one
graph for every length and row count, what a search could use; compiled at two lengths, timed
at (a)'s). The compile times count too: a whole translate command at d 256 takes ~11-14 s.

``--measure rows``: the same products' µs per call by the bf16, dynamic int8 and a plain float32
product (``addmm``, the weight transposed) at 5 to 320 rows: where oneDNN's fixed cost per call
takes over (a batch's last sentences, a one-sentence request).

``--measure int8``: the search's products at 320 rows by three kernels: bfloat16 with the weight
packed for oneDNN (the default search), torch's dynamic int8 product (``--int8``), and oneDNN's
int8 product on an activation rounded to 8 bits beforehand (``onednn.qlinear_pointwise``, which
uses AMX's int8 tiles where the CPU has them); ms per call, the best of 5 × 40 calls.

    python benchmarks/search_ceilings.py --measure compile --run exp/race-tf/transformer-256/attnmt \
        --data exp/race-tf/data
    python benchmarks/search_ceilings.py --measure int8 --hidden 256
    python benchmarks/search_ceilings.py --measure rows --hidden 256

Prints one JSON line per measurement and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

ROWS, ENTRIES, SOURCE, VOCAB = 320, 64, 40, 8000  # 64 sentences × beam 5; 40 source pieces


def best_ms(fn, calls: int = 40, repeats: int = 5) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return round(min(times) * 1e3, 3)


def attnmt_steps(run: str, data: Path, words: int) -> tuple[float, int, dict]:
    """The median time (ms) of attnmt's search steps at the full 320 rows, their median position,
    and the model's sizes."""
    import sentencepiece as spm

    from attnmt.decode.search import beam_search
    from attnmt.kernels import packed
    from attnmt.runs.loader import load_run

    model = load_run(run).model.eval()
    for m in model.modules():
        if isinstance(m, packed.PackedLinear):
            m.bf16_search = packed.native_bf16()
    sp = spm.SentencePieceProcessor(model_file=str(data / "spm.en.model"))
    lines = [sp.encode(line) or [1] for line in (data / "test.en").read_text(encoding="utf-8").splitlines()]
    lines.sort(key=lambda x: abs(len(x) - words))
    batch = lines[:ENTRIES]
    width = max(len(x) for x in batch)
    src = torch.tensor([x + [0] * (width - len(x)) for x in batch])
    lengths = torch.tensor([len(x) for x in batch])
    steps: list[tuple[int, int, float]] = []
    plain_step = model.step

    def timed(prefix, state, enc, need_weights=False):
        start = time.perf_counter()
        out = plain_step(prefix, state, enc, need_weights)
        steps.append((prefix.size(0), prefix.size(1), time.perf_counter() - start))
        return out

    model.step = timed
    with torch.inference_mode():
        beam_search(model, src[:8], lengths[:8], beam_size=5)
        for _ in range(3):
            beam_search(model, src, lengths, beam_size=5)
    full = [(t, s) for rows, t, s in steps if rows == ROWS]
    cfg = model.cfg
    sizes = {"hidden": cfg.hidden, "heads": cfg.heads, "ff": cfg.ff, "layers": cfg.layers,
             "vocab": model.output.weight.size(0)}
    return (round(statistics.median(s for _, s in full) * 1e3, 3), int(statistics.median(t for t, _ in full)), sizes)


class PlainStep(torch.nn.Module):
    """A pre-norm decoder search step of standard attention written plainly (bfloat16 products,
    float32 residual stream), for the compiler: the math of attnmt's step, not its kernels."""

    def __init__(self, hidden: int, heads: int, ff: int, layers: int, vocab: int):
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.layers = torch.nn.ModuleList(torch.nn.ModuleDict({
            "qkv": torch.nn.Linear(hidden, 3 * hidden), "o": torch.nn.Linear(hidden, hidden),
            "cq": torch.nn.Linear(hidden, hidden), "co": torch.nn.Linear(hidden, hidden),
            "f1": torch.nn.Linear(hidden, ff), "f2": torch.nn.Linear(ff, hidden)}) for _ in range(layers))
        self.output = torch.nn.Linear(hidden, vocab, bias=False)
        self.to(torch.bfloat16).requires_grad_(False)

    def forward(self, x, keys, values, cross_keys, cross_values, index):
        R, D, H = x.size(0), self.hidden, self.heads
        low, new = torch.bfloat16, []
        for i, layer in enumerate(self.layers):
            h = F.layer_norm(x, (D,)).to(low)
            q, k, v = layer["qkv"](h).view(R, 1, 3, H, D // H).unbind(2)
            k_all = torch.cat([keys[i].index_select(0, index), k.transpose(1, 2)], 2)
            v_all = torch.cat([values[i].index_select(0, index), v.transpose(1, 2)], 2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k_all, v_all)
            x = x + layer["o"](a.transpose(1, 2).reshape(R, 1, D)).float()
            h = F.layer_norm(x, (D,)).to(low)
            q = layer["cq"](h).view(ENTRIES, R // ENTRIES, H, D // H).transpose(1, 2)  # a sentence's rows as queries
            a = F.scaled_dot_product_attention(q, cross_keys[i], cross_values[i])
            x = x + layer["co"](a.transpose(1, 2).reshape(R, 1, D)).float()
            h = F.layer_norm(x, (D,)).to(low)
            x = x + layer["f2"](F.relu(layer["f1"](h))).float()
            new += [k_all, v_all]
        return torch.log_softmax(self.output(F.layer_norm(x, (D,)).to(low)).float(), -1), new


def measure_compile(args) -> dict:
    attnmt_ms, position, sizes = attnmt_steps(args.run, Path(args.data), args.words)
    H, D, L = sizes["heads"], sizes["hidden"], sizes["layers"]
    g = torch.Generator().manual_seed(0)
    step = PlainStep(D, H, sizes["ff"], L, sizes["vocab"])

    def inputs(length: int) -> tuple:
        cache = lambda n, t: [torch.randn(n, H, t, D // H, generator=g).to(torch.bfloat16) for _ in range(L)]  # noqa: E731
        return (torch.randn(ROWS, 1, D, generator=g), cache(ROWS, length), cache(ROWS, length),
                cache(ENTRIES, SOURCE), cache(ENTRIES, SOURCE), torch.randint(0, ROWS, (ROWS,), generator=g))

    import torch._inductor.config as inductor

    inductor.freezing = True  # weights as constants: Inductor packs them for oneDNN once
    result = {"measure": "compile", "run": args.run, "sizes": sizes, "rows": ROWS, "position": position,
              "attnmt_step_ms": attnmt_ms}
    at = inputs(position)
    with torch.inference_mode():
        result["plain_eager_ms"] = best_ms(lambda: step(*at), calls=10)
        # static shapes: the bound (a search changes the cache length at every step, so each step
        # would compile anew); dynamic: one graph for every length and row count, what a search can use
        for name, dynamic in (("static", False), ("dynamic", True)):
            torch._dynamo.reset()
            start = time.perf_counter()
            compiled_step = torch.compile(step, dynamic=dynamic)
            compiled_step(*inputs(position + 8))
            compiled_step(*at)
            result[f"compile_{name}_s"] = round(time.perf_counter() - start, 1)
            result[f"plain_compiled_{name}_ms"] = best_ms(lambda: compiled_step(*at), calls=10)
    result["dynamic_vs_attnmt"] = round(attnmt_ms / result["plain_compiled_dynamic_ms"], 3)
    return result


def product_kernels(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict:
    """x Wᵀ + b by each kernel, as functions of no arguments (the weights packed once here)."""
    from attnmt.kernels import packed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bf16, int8 = packed.pack(w, ROWS, True, few_rows=True, bias=b), packed.pack_int8(w, ROWS, b)
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
    qw = torch.ops.onednn.qlinear_prepack(torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8),
                                          list(x.shape))
    zeros = torch.zeros(w.size(0), dtype=torch.int32)

    def onednn_int8():  # x to 8 bits over its own range, then oneDNN's int8 product
        lo, hi = float(x.min().clamp(max=0)), float(x.max().clamp(min=0))
        step = (hi - lo) / 255 or 1.0
        zero = int(round(-lo / step))
        xq = torch.clamp(torch.round(x / step) + zero, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(xq, step, zero, qw, scale, zeros, b, 1.0, 0,
                                                  torch.float32, "none", [], "")

    w_t = w.t().contiguous()  # (in, out): the layout a plain product of few rows reads fastest
    return {"bf16": lambda: packed.linear(x, bf16, b), "dynamic_int8": lambda: packed.linear(x, int8, b),
            "onednn_int8": onednn_int8, "float32_plain": lambda: torch.addmm(b, x, w_t)}


def measure_int8(args) -> dict:
    from attnmt.kernels import packed

    D = args.hidden
    shapes = {"qkv": (D, 3 * D), "ff1": (D, 4 * D), "ff2": (4 * D, D), "output": (D, VOCAB)}
    rows: dict = {}
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, (inp, out) in shapes.items():
            x = torch.randn(ROWS, inp, generator=g)
            w, b = torch.randn(out, inp, generator=g) * inp**-0.5, torch.randn(out, generator=g) * 0.1
            rows[name] = {"shape": [ROWS, inp, out],
                          **{f"{kernel}_ms": best_ms(fn) for kernel, fn in product_kernels(x, w, b).items()}}
    return {"measure": "int8", "hidden": D, "amx": packed.amx_tiles(), "products": rows}


def measure_rows(args) -> dict:
    """Microseconds per call of the search's products by kernel as the rows shrink (a batch's last
    sentences, a one-sentence request): where each kernel's fixed cost per call takes over."""
    D = args.hidden
    shapes = {"qkv": (D, 3 * D), "o": (D, D), "ff1": (D, 4 * D), "ff2": (4 * D, D), "output": (D, VOCAB)}
    g = torch.Generator().manual_seed(0)
    table: dict = {}
    with torch.no_grad():
        for name, (inp, out) in shapes.items():
            w, b = torch.randn(out, inp, generator=g) * inp**-0.5, torch.randn(out, generator=g) * 0.1
            for rows in ROW_COUNTS:
                kernels = product_kernels(torch.randn(rows, inp, generator=g), w, b)
                table.setdefault(name, {})[rows] = {k: round(best_ms(kernels[k], calls=100) * 1e3, 1)
                                                    for k in ("bf16", "dynamic_int8", "float32_plain")}
    return {"measure": "rows", "hidden": D, "us_per_call": table}


ROW_COUNTS = (5, 10, 20, 40, 80, 160, 320)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", choices=("compile", "int8", "rows"), required=True)
    ap.add_argument("--run", help="a trained attnmt Transformer run (--measure compile)")
    ap.add_argument("--data", help="peer_race.py's data folder: test.en, spm.en.model (--measure compile)")
    ap.add_argument("--words", type=int, default=20, help="source pieces of the sentences searched")
    ap.add_argument("--hidden", type=int, default=256, help="model size (--measure int8, rows)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.measure == "compile":
        if not (args.run and args.data):
            ap.error("--measure compile needs --run and --data")
        result = measure_compile(args)
        print(json.dumps(result))
        print(f"summary: attnmt's step {result['attnmt_step_ms']} ms at {ROWS} rows, position {result['position']}; "
              f"the plain step eager {result['plain_eager_ms']} ms, compiled for static shapes "
              f"{result['plain_compiled_static_ms']} ms ({result['compile_static_s']} s to compile), for dynamic "
              f"shapes {result['plain_compiled_dynamic_ms']} ms ({result['compile_dynamic_s']} s): the dynamic one "
              f"at {result['dynamic_vs_attnmt']}x attnmt's rate")
    elif args.measure == "rows":
        result = measure_rows(args)
        print(json.dumps(result))
        print("summary (µs, bf16 / dynamic int8 / float32 plain): " + "; ".join(
            f"{name} " + " ".join(f"{r}:{v['bf16']}/{v['dynamic_int8']}/{v['float32_plain']}" for r, v in rows.items())
            for name, rows in result["us_per_call"].items()))
    else:
        result = measure_int8(args)
        print(json.dumps(result))
        print("summary: " + ", ".join(f"{n} bf16 {r['bf16_ms']} / dynamic int8 {r['dynamic_int8_ms']} / "
                                      f"oneDNN int8 {r['onednn_int8_ms']} ms" for n, r in result["products"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
