"""Where a Transformer training update and a beam-search batch spend their time (issue 37): a
tool for choosing the next speed lever, not a claim (the claim is ``peer_race.py --model
transformer``).

    python benchmarks/transformer_profile.py --data OUT/data [--hidden 256] [--threads 2]
        [--updates 3] [--run RUN] [--sentences 64] [--float32] [--set KEY=VALUE ...]

``--data``: a ``peer_race.py`` data folder (``train.{en,es}``, ``test.en``, ``spm.{en,es}.model``).
The model is ``configs/race-transformer.yaml`` at d ``--hidden`` (hidden/64 heads, ff 4·hidden):
random weights, or the trained ``--run`` (a random model's beams never end, so each sentence
runs to its length limit 2·|x| + 10: the search profile is then of the longest search). bfloat16
products as the trainer's ``train.amp`` and ``attnmt translate``'s default where the CPU has
bfloat16 units (``--float32``: never). Prints, for the updates and for one beam-5 batch of
``--sentences`` test sentences, the wall time, the share of operator self time by kind, and
the ten most expensive operators; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = (  # (kind, operator-name fragments), the first match wins
    ("products", ("mkldnn::_linear", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul",
                  "aten::baddbmm", "aten::_scaled_dot_product", "flash_attention")),
    ("softmax/loss", ("softmax", "nll_loss", "cross_entropy", "logsumexp")),
    ("layer_norm", ("layer_norm",)),
    ("optimizer", ("_fused_adam", "adam", "foreach")),
    ("copies/reorders", ("aten::copy_", "aten::cat", "aten::index_select", "aten::clone", "aten::contiguous",
                         "aten::to", "aten::_to_copy", "aten::gather", "aten::index", "aten::repeat")),
    ("top-k/search", ("topk", "amax", "sort", "nonzero", "aten::max", "aten::item", "_local_scalar_dense")),
)


def shares(events) -> tuple[dict, list]:
    total = sum(e.self_cpu_time_total for e in events) or 1
    by_kind: dict = defaultdict(float)
    for e in events:
        kind = next((k for k, frags in KINDS if any(f in e.key for f in frags)), "other element-wise")
        by_kind[kind] += e.self_cpu_time_total
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
    return ({k: round(v / total, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            [(e.key, e.count, round(e.self_cpu_time_total / 1e3, 1)) for e in top])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--run", help="a trained Transformer run for the search (default: random weights)")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override, e.g. model.enc_self_attention=window-add-seg (repeatable)")
    args = ap.parse_args()

    import sentencepiece as spm
    import torch

    from attnmt.config import load_config
    from attnmt.data.batching import filter_by_length, iterate_batches, make_batches
    from attnmt.decode.search import beam_search
    from attnmt.kernels import packed
    from attnmt.models import build_model
    from attnmt.models.common import token_loss
    from attnmt.models.transformer import Transformer

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    bf16 = not args.float32 and packed.native_bf16()
    cfg = load_config(ROOT / "configs" / "race-transformer.yaml",
                      [f"model.hidden={args.hidden}", f"model.heads={max(args.hidden // 64, 1)}",
                       f"model.ff={4 * args.hidden}", *args.set])
    sp = {lang: spm.SentencePieceProcessor(model_file=str(data / f"spm.{lang}.model")) for lang in ("en", "es")}
    ids = {lang: [sp[lang].encode(line)
                  for line in (data / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:4000]]
           for lang in ("en", "es")}
    src, tgt, _ = filter_by_length(ids["en"], ids["es"], cfg.data.max_len)
    vocab = {lang: sp[lang].get_piece_size() for lang in ("en", "es")}  # attnmt uses its ids as they are
    torch.manual_seed(0)
    model = build_model(cfg, vocab["en"], vocab["es"]).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    batches = list(iterate_batches(src, tgt, make_batches(src, tgt, cfg.train.batch_size, "tokens", seed=1)
                                   [: args.updates + 2]))

    def update(b) -> int:
        opt.zero_grad(set_to_none=True)
        with packed.bf16_products(bf16):
            own = getattr(type(model), "token_loss", None)
            if own is not None:
                loss = own(model, b.src, b.src_lengths, b.tgt_in, b.tgt_out, 0.1)
            else:
                logits, _ = model(b.src, b.src_lengths, b.tgt_in)
                loss = token_loss(logits, b.tgt_out, 0.1)
            (loss / b.target_tokens).backward()
        opt.step()
        return b.target_tokens

    for b in batches[:2]:
        update(b)
    report: dict = {"hidden": args.hidden, "threads": args.threads, "bf16": bf16}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start, pieces = time.perf_counter(), 0
        for b in batches[2:]:
            pieces += update(b)
        took = time.perf_counter() - start
    kinds, top = shares(prof.key_averages())
    report["train"] = {"updates": len(batches) - 2, "s_per_update": round(took / max(len(batches) - 2, 1), 3),
                       "tgt_tok_s": round(pieces / took, 1), "shares": kinds, "top": top}
    print(f"training: {report['train']['s_per_update']} s/update (profiled), {kinds}")
    for row in top:
        print("   ", row)

    if args.run:
        from attnmt.runs.loader import load_run

        model = load_run(args.run).model
    model.eval()
    for m in model.modules():
        if isinstance(m, packed.PackedLinear):
            m.bf16_search = bf16
    lines = (data / "test.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    test = [sp["en"].encode(line) or [1] for line in lines]
    width = max(len(x) for x in test)
    src_t = torch.tensor([x + [0] * (width - len(x)) for x in test])
    lengths = torch.tensor([len(x) for x in test])
    assert isinstance(model, Transformer)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        hyps = beam_search(model, src_t, lengths, beam_size=5)
        took = time.perf_counter() - start
    kinds, top = shares(prof.key_averages())
    out_pieces = sum(len(h[0].tokens) + 1 for h in hyps)
    report["search"] = {"sentences": len(test), "s": round(took, 2), "output_pieces": out_pieces,
                        "shares": kinds, "top": top}
    print(f"beam search: {took:.2f} s for {len(test)} sentences, {out_pieces} pieces, {kinds}")
    for row in top:
        print("   ", row)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
