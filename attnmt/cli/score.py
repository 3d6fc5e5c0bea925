"""attnmt score --hyp F --ref F [--json]          BLEU (detokenised and tokenised) and chrF
attnmt score --model RUN --src F --ref F         perplexity of a model on a parallel corpus"""

from __future__ import annotations

import argparse
import json

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="BLEU/chrF of translations, or a model's perplexity")
    p.add_argument("--hyp", help="system output, one sentence per line")
    p.add_argument("--ref", required=True, help="reference translations")
    p.add_argument("--model", help="run directory: report perplexity of --ref given --src")
    p.add_argument("--src", help="source side for --model")
    p.add_argument("--lang", default="en", help="language for the tokenised BLEU variant")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import read_lines

    refs = read_lines(args.ref)
    if args.model:
        result = model_perplexity(args.model, args.src, args.ref)
    else:
        if not args.hyp:
            raise UserError("give --hyp (to score translations) or --model and --src (perplexity)")
        from attnmt.eval.scoring import score_all

        hyps = read_lines(args.hyp)
        if len(hyps) != len(refs):
            raise UserError(f"line counts differ: {args.hyp} has {len(hyps)} lines, {args.ref} has {len(refs)}")
        result = score_all(hyps, refs, args.lang)
    if args.json:
        print(json.dumps(result))
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))
    return 0


def model_perplexity(run_dir: str, src_path: str | None, ref_path: str) -> dict:
    from attnmt.data.batching import encode_corpus
    from attnmt.data.corpus import read_lines
    from attnmt.decode.translate import load_model
    from attnmt.runs.device import resolve_device
    from attnmt.train.training import perplexity

    device = resolve_device("auto")
    model, cfg, src_tok, tgt_tok = load_model(run_dir, "best", device)
    refs = read_lines(ref_path)
    if cfg.task == "translate":
        if not src_path:
            raise UserError("--src is needed for a translation model's perplexity")
        srcs = read_lines(src_path)
        if len(srcs) != len(refs):
            raise UserError(f"line counts differ: {src_path} has {len(srcs)} lines, {ref_path} has {len(refs)}")
        pairs = [(s, r) for s, r in zip(srcs, refs) if s.strip() and r.strip()]
        lower = (lambda x: x.lower()) if cfg.data.lowercase else (lambda x: x)
        src = encode_corpus(src_tok, [lower(s) for s, _ in pairs], cfg.data.reverse_source)
        tgt = encode_corpus(tgt_tok, [lower(r) for _, r in pairs])
        if cfg.model.attention == "global" and cfg.model.score == "location":
            src = [s[: cfg.model.max_src_len] for s in src]
    else:
        tgt = [t for t in encode_corpus(tgt_tok, [r for r in refs if r.strip()]) if t]
        src = [[] for _ in tgt]
    result = perplexity(model, src, tgt, device)
    return {"ppl": round(result["ppl"], 3), "tokens": result["tokens"]}
