"""attnmt eval --model RUN --input F [--ngram M] [--alpha A[,A..]] [--lambda L[,L..]] [--ngram-only]
             [--tune-on DEV] [--json]

Perplexity of a language model (``--input``: text, one sentence a line) or a translation model
(``--input``: parallel prefix or .tsv, the run's languages), teacher-forced, </s> scored:

    ppl      = exp(−Σ log P(token) / #tokens)                  tokens of the run's tokenizer + </s>
    word_ppl = exp(−Σ log P(token) / (#words + #sentences))    a word's probability is the product of
                                                               its pieces' (Li et al. 2022, §5.1);
                                                               words = whitespace words of the text

Settings, each scored from one neural forward pass and one n-gram query per batch:

    (none)        the run as configured (its n-gram and α at the checkpoint's step, if any)
    --alpha LIST  NgramRes: softmax(φ(h) + α·log P_ng) for each α (α = 0: the neural model alone)
    --lambda LIST Prob-Inter: λ·P_neural + (1−λ)·P_ng for each λ
    --ngram-only  the n-gram model alone, in the same token space

``--ngram M`` swaps the n-gram model (plug and play; the neural weights are not touched).
``--tune-on DEV`` picks the best grid setting on DEV and reports it (and the rest) on --input.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="perplexity of a model, with or without an n-gram LM (NgramRes)")
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--input", "-i", required=True,
                   help="LM: text file; translation: parallel prefix (PREFIX.src/.tgt) or .tsv")
    p.add_argument("--ngram", help="n-gram model to use instead of the run's (same target vocabulary)")
    p.add_argument("--alpha", help="NgramRes α, or a comma-separated grid")
    p.add_argument("--lambda", dest="lam", help="Prob-Inter λ, or a comma-separated grid")
    p.add_argument("--ngram-only", action="store_true", help="also score the n-gram model alone")
    p.add_argument("--tune-on", metavar="DEV", help="choose the best --alpha/--lambda setting on DEV")
    p.add_argument("--batch-tokens", type=int, default=3000, help="padded target tokens per batch")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Setting:
    kind: str  # residual | interp | ngram
    value: float = 0.0  # α or λ

    @property
    def label(self) -> str:
        if self.kind == "residual":
            return "neural" if self.value == 0 else f"ngramres alpha={self.value:g}"
        if self.kind == "interp":
            return f"prob-inter lambda={self.value:g}"
        return "ngram"


def _grid(text: str | None, flag: str) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} expects numbers separated by commas, got {text!r}") from None
    if not values:
        raise UserError(f"{flag} is empty")
    return values


def read_eval_data(cfg, src_tok, tgt_tok, path: str) -> tuple[list[list[int]], list[list[int]], int]:
    """(source ids, target ids, whitespace words of the targets) as the trainer encodes them."""
    from attnmt.data.batching import encode_corpus
    from attnmt.data.corpus import read_lines, read_parallel

    lower = (lambda x: x.lower()) if cfg.data.lowercase else (lambda x: x)
    if cfg.task == "translate":
        srcs, tgts, _ = read_parallel(path, cfg.data.src, cfg.data.tgt)
        pairs = [(lower(s), lower(t)) for s, t in zip(srcs, tgts) if s.strip() and t.strip()]
        src = encode_corpus(src_tok, [s for s, _ in pairs], cfg.data.reverse_source)
        if cfg.model.attention == "global" and cfg.model.score == "location":
            src = [s[: cfg.model.max_src_len] for s in src]
        texts = [t for _, t in pairs]
        tgt = encode_corpus(tgt_tok, texts)
    elif cfg.task == "lm":
        texts = [lower(x) for x in read_lines(path) if x.strip()]
        encoded = encode_corpus(tgt_tok, texts)
        texts = [t for t, ids in zip(texts, encoded) if ids]
        tgt = [ids for ids in encoded if ids]
        src = [[] for _ in tgt]
    else:
        raise UserError(f"attnmt eval scores lm and translate runs, not task {cfg.task!r}")
    if not tgt:
        raise UserError("no sentences to score", path)
    return src, tgt, sum(len(t.split()) for t in texts)


def score_settings(model, ngram, settings: list[Setting], src, tgt, device, batch_tokens: int = 3000) -> list[float]:
    """Total natural-log probability of ``tgt`` (</s> included) under each setting.

    model: the plain neural model (φ); ngram: an NgramLM over the same ids, or None.
    """
    import torch

    from attnmt.data.batching import iterate_batches, make_batches
    from attnmt.data.vocab import PAD
    from attnmt.ngram.residual import combine

    totals = [0.0] * len(settings)
    model.eval()
    if ngram is not None:
        ngram.to(device)
    with torch.no_grad():
        for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
            batch = batch.to(device)
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
            logits = logits.float()
            ng = ngram.sequence_logprobs(batch.tgt_in) if ngram is not None else None
            mask = batch.tgt_out != PAD
            gold = batch.tgt_out.unsqueeze(-1)
            for i, s in enumerate(settings):
                if s.kind == "ngram":
                    logp = ng
                else:
                    logp = torch.log_softmax(combine(logits, ng, s.kind, s.value, s.value), dim=-1)
                totals[i] += float(logp.gather(-1, gold).squeeze(-1)[mask].double().sum())
    return totals


def evaluate(model, cfg, src_tok, tgt_tok, path: str, settings: list[Setting], ngram, device,
             batch_tokens: int) -> list[dict]:
    src, tgt, words = read_eval_data(cfg, src_tok, tgt_tok, path)
    totals = score_settings(model, ngram, settings, src, tgt, device, batch_tokens)
    tokens = sum(len(t) + 1 for t in tgt)
    sents = len(tgt)
    rows = []
    for s, total in zip(settings, totals):
        rows.append({
            "setting": s.label, "kind": s.kind, "value": s.value,
            "ppl": math.exp(min(-total / tokens, 700)),
            "word_ppl": math.exp(min(-total / (words + sents), 700)),
            "logprob": total, "tokens": tokens, "words": words, "sentences": sents,
        })
    return rows


def run(args: argparse.Namespace) -> int:
    from attnmt.decode.translate import load_model
    from attnmt.ngram.model import load_ngram
    from attnmt.ngram.residual import NgramResidual, check_vocab, unwrap
    from attnmt.runs.device import resolve_device

    device = resolve_device(args.device)
    loaded, cfg, src_tok, tgt_tok = load_model(args.model, args.checkpoint, device)
    model = unwrap(loaded)
    ngram = loaded.ngram if isinstance(loaded, NgramResidual) else None
    if args.ngram:
        ngram = load_ngram(args.ngram)
        check_vocab(ngram, tgt_tok, args.ngram)
    alphas, lams = _grid(args.alpha, "--alpha"), _grid(args.lam, "--lambda")
    if any(a < 0 for a in alphas) or any(not 0 <= x <= 1 for x in lams):
        raise UserError("--alpha values must be >= 0 and --lambda values in [0, 1]")
    grid = [Setting("residual", a) for a in alphas] + [Setting("interp", x) for x in lams]
    if (grid and any(s.value != 0 or s.kind == "interp" for s in grid) or args.ngram_only) and ngram is None:
        raise UserError("this run has no n-gram model; give one with --ngram")
    if isinstance(loaded, NgramResidual):
        configured = Setting(loaded.mode, loaded.lam if loaded.mode == "interp" else loaded.alpha)
    else:
        configured = Setting("residual", 0.0)
    settings = list(dict.fromkeys(([] if grid else [configured]) + grid + ([Setting("ngram")] if args.ngram_only else [])))
    out: dict = {"model": args.model, "input": args.input}
    chosen = None
    if args.tune_on:
        if len(grid) < 2:
            raise UserError("--tune-on needs a grid: several --alpha and/or --lambda values")
        dev_rows = evaluate(model, cfg, src_tok, tgt_tok, args.tune_on, grid, ngram, device, args.batch_tokens)
        best = min(range(len(grid)), key=lambda i: dev_rows[i]["ppl"])
        chosen = grid[best].label
        out["tune_on"] = args.tune_on
        out["dev"] = dev_rows
    rows = evaluate(model, cfg, src_tok, tgt_tok, args.input, settings, ngram, device, args.batch_tokens)
    if chosen is None and len(grid) > 1:
        chosen = min((r for r in rows if r["kind"] != "ngram"), key=lambda r: r["ppl"])["setting"]
    out["results"] = rows
    out["best"] = chosen
    if args.json:
        print(json.dumps(out))
        return 0
    if args.tune_on:
        for r in out["dev"]:
            print(f"dev  {r['setting']:<28} ppl={r['ppl']:.3f} word_ppl={r['word_ppl']:.3f}")
    for r in rows:
        mark = "  *best" + (" on dev" if args.tune_on else "") if r["setting"] == chosen else ""
        print(f"{r['setting']:<28} ppl={r['ppl']:.3f} word_ppl={r['word_ppl']:.3f} tokens={r['tokens']} "
              f"words={r['words']} sentences={r['sentences']}{mark}")
    return 0
