"""The Transformer race's variant rows: attnmt's race Transformer with each attention variant,
trained and translated exactly as ``peer_race.py --model transformer`` trains and translates
attnmt's side, one variant after the other, each with its ratios to standard attention.

    python benchmarks/variant_rows.py [--budget 120] [--size 256] [--threads 2] [--out DIR]
        [--data data/bible] [--variants standard,relative,...]

Placements (the configs of the same names): ``relative`` in encoder and decoder self-attention
(configs/transformer-relative.yaml; the race's sinusoidal positions kept); ``localness`` in encoder
self-attention (configs/transformer-localness.yaml); every window variant in encoder
self-attention and cross-attention, decoder self-attention standard (the paper's best placement,
configs/paper-window-*.yaml); ``window-add-seg+paper`` adds the authors' preset
(``model.window_preset: paper``). Per variant: ``s_per_step`` and ``tgt_tok_s`` between the first
and last progress report (``peer_race.rates``), updates in the budget, dev perplexity, BLEU/chrF and
the whole beam-5 translate command on the test set (batches of 64). Decoding time depends on how
long the outputs are, and an under-trained model's outputs differ in length by variant, so the
decoding ratio is taken per output piece (``ms_per_piece``: the translate command's wall time /
the pieces it wrote, sentencepiece-encoded) as well as per command.

The last line is one JSON object {"size", "budget", "threads", "rows": [{variant, ...}], ...};
the line before it a summary: each variant's step-time and decoding ratios to standard.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_race  # noqa: E402
from race_peers import RaceError  # noqa: E402

WINDOW = ("enc_self_attention", "cross_attention")
PLACEMENTS = {
    "standard": {},
    "relative": {"enc_self_attention": "relative", "dec_self_attention": "relative"},
    "localness": {"enc_self_attention": "localness"},
    **{v: {k: v for k in WINDOW} for v in ("window-mul", "window-add", "window-mul-seg", "window-add-seg")},
    "window-add-seg+paper": {**{k: "window-add-seg" for k in WINDOW}, "window_preset": "paper"},
}


def variant_sets(variant: str) -> list[str]:
    """The ``--set`` overrides of one variant row."""
    if variant not in PLACEMENTS:
        raise RaceError(f"unknown variant {variant!r} (known: {', '.join(PLACEMENTS)})")
    return [f"model.{k}={v}" for k, v in PLACEMENTS[variant].items()]


def output_pieces(hyp: Path, spm_model: Path) -> int:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return sum(len(sp.encode(line)) + 1 for line in hyp.read_text(encoding="utf-8").splitlines())


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's ``step_ratio`` (s_per_step / standard's), ``decode_ratio`` (translate_s / standard's)
    and ``decode_piece_ratio`` (ms_per_piece / standard's); > 1 means slower than standard."""
    base = next((r for r in rows if r["variant"] == "standard"), None)
    if base is None:
        return rows
    for r in rows:
        r["step_ratio"] = round(r["s_per_step"] / base["s_per_step"], 3)
        r["decode_ratio"] = round(r["translate_s"] / base["translate_s"], 3)
        r["decode_piece_ratio"] = round(r["ms_per_piece"] / base["ms_per_piece"], 3)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=120, help="seconds of wall clock per variant's training")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/variant_rows")
    ap.add_argument("--data", default="data/bible")
    ap.add_argument("--variants", default=",".join(PLACEMENTS))
    ap.add_argument("--max-train-lines", type=int, default=0, help="smoke tests: first N training pairs only")
    ap.add_argument("--max-eval-lines", type=int, default=0, help="smoke tests: first N dev and test pairs only")
    ap.add_argument("--report-every", type=int, default=peer_race.REPORT_EVERY)
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        variants = [v for v in args.variants.split(",") if v.strip()]
        for v in variants:
            variant_sets(v)
        cut = f"-{args.max_train_lines}-{args.max_eval_lines}" if args.max_train_lines or args.max_eval_lines else ""
        data = peer_race.prepare_data(Path(args.data), out / f"data{cut}", args.max_train_lines, args.max_eval_lines)
        rows = []
        for variant in variants:
            sets = peer_race.attnmt_sets("transformer", data, args.size, args.threads, args.budget,
                                         variant_sets(variant), args.report_every)
            peer_race.attnmt_config("transformer", sets)  # a bad combination fails before training
            run_dir = out / f"transformer-{args.size}" / variant
            row = {"variant": variant, **peer_race.race_attnmt("transformer", data, run_dir, args.budget,
                                                                args.threads, sets, int8=False)}
            row["ms_per_piece"] = round(1000 * row["translate_s"] / output_pieces(run_dir / "test.hyp.es",
                                                                                   data / "spm.es.model"), 3)
            print(f"{variant}: {json.dumps(row)}", flush=True)
            rows.append(row)
    except RaceError as err:
        print(f"variant_rows: error: {err}", file=sys.stderr)
        return 2
    with_ratios(rows)
    print("; ".join(f"{r['variant']} step {r.get('step_ratio', '?')}x decode {r.get('decode_piece_ratio', '?')}x/piece"
                    for r in rows))
    print(json.dumps({"size": args.size, "budget": args.budget, "threads": args.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
