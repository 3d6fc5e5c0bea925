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

``--limit-lines N`` adds decoding at equal work: per variant a model after one update (random
but for one step of warm-up, so no hypothesis ends before its length limit 2·|x| + 10 and every
variant writes the same number of pieces), and the whole translate command on the first N test
lines, beam 5, batches of 64, ``--limit-rounds`` rounds over the variants in turn (each round
starting one variant later): ``limit_translate_s`` and ``limit_decode_ratio`` from each one's
fastest round, and ``limit_decode_ratio_paired``, the median over rounds of its time over
standard's in the same round (``limit_round_ratios``), which the box's drift between rounds moves less.
``--limit-only`` measures that alone (no training rows).

The last line is one JSON object {"size", "budget", "threads", "rows": [{variant, ...}], ...};
the line before it a summary: each variant's step-time and decoding ratios to standard.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
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


RATIOS = {"step_ratio": "s_per_step", "decode_ratio": "translate_s", "decode_piece_ratio": "ms_per_piece",
          "limit_decode_ratio": "limit_translate_s"}


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's ``step_ratio`` (s_per_step / standard's), ``decode_ratio`` (translate_s / standard's),
    ``decode_piece_ratio`` (ms_per_piece / standard's) and ``limit_decode_ratio`` (limit_translate_s /
    standard's), those whose measure the rows have; > 1 means slower than standard."""
    base = next((r for r in rows if r["variant"] == "standard"), None)
    if base is None:
        return rows
    for r in rows:
        for ratio, measure in RATIOS.items():
            if measure in r and measure in base:
                r[ratio] = round(r[measure] / base[measure], 3)
        if "limit_rounds_s" in r and "limit_rounds_s" in base:  # each round's time over standard's in it
            r["limit_round_ratios"] = [round(a / b, 3) for a, b in zip(r["limit_rounds_s"], base["limit_rounds_s"])]
            r["limit_decode_ratio_paired"] = round(statistics.median(r["limit_round_ratios"]), 3)
    return rows


def limit_decoding(variants: list[str], data: Path, out: Path, size: int, threads: int, lines: int,
                   rounds: int) -> dict[str, dict]:
    """Per variant: the whole translate command on the first ``lines`` test lines with a model
    after one update, every hypothesis running to its length limit (the module docstring)."""
    env = peer_race.attnmt_env(threads)
    attnmt = [sys.executable, "-m", "attnmt"]
    test = out / f"test.first{lines}.en"
    test.write_text("".join(line + "\n" for line in
                            (data / "test.en").read_text(encoding="utf-8").splitlines()[:lines]), encoding="utf-8")
    runs = {}
    for variant in variants:
        run_dir = out / f"transformer-{size}" / f"limit-{variant}"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        sets = peer_race.attnmt_sets("transformer", data, size, threads, 3600, variant_sets(variant))
        cmd = attnmt + ["train", str(peer_race.CONFIGS["transformer"]), "--out", str(run_dir), "--max-steps", "1"]
        peer_race.run(cmd + [x for s in sets for x in ("--set", s)], run_dir.parent / f"limit-{variant}.train.log", env)
        runs[variant] = run_dir
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in variants[r % len(variants):] + variants[:r % len(variants)]:  # each round starts one later
            run_dir = runs[variant]
            cmd = attnmt + ["translate", "--model", str(run_dir), "--input", str(test), "--output",
                            str(run_dir / "limit.hyp.es"), "--beam", "5", "--batch-size", "64"]
            times[variant].append(round(peer_race.run(cmd, run_dir / "limit.translate.log", env), 2))
    return {v: {"limit_translate_s": min(times[v]), "limit_rounds_s": times[v],
                "limit_pieces": output_pieces(runs[v] / "limit.hyp.es", data / "spm.es.model")} for v in variants}


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
    ap.add_argument("--limit-lines", type=int, default=0,
                    help="also decode the first N test lines at equal work (module docstring); 0: no")
    ap.add_argument("--limit-rounds", type=int, default=2)
    ap.add_argument("--limit-only", action="store_true", help="only the equal-work decoding (no training rows)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        variants = [v for v in args.variants.split(",") if v.strip()]
        for v in variants:
            variant_sets(v)
        cut = f"-{args.max_train_lines}-{args.max_eval_lines}" if args.max_train_lines or args.max_eval_lines else ""
        data = peer_race.prepare_data(Path(args.data), out / f"data{cut}", args.max_train_lines, args.max_eval_lines)
        rows = []
        for variant in variants if not args.limit_only else []:
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
        if args.limit_lines or args.limit_only:
            limits = limit_decoding(variants, data, out, args.size, args.threads, args.limit_lines or 400,
                                    args.limit_rounds)
            by_name = {r["variant"]: r for r in rows}
            rows = [{**by_name.get(v, {"variant": v}), **limits[v]} for v in variants]
    except RaceError as err:
        print(f"variant_rows: error: {err}", file=sys.stderr)
        return 2
    with_ratios(rows)
    print("; ".join(f"{r['variant']} step {r.get('step_ratio', '?')}x decode {r.get('decode_piece_ratio', '?')}x/piece"
                    f" {r.get('limit_decode_ratio', '?')}x at equal work"
                    f" (rounds paired: {r.get('limit_decode_ratio_paired', '?')}x)" for r in rows))
    budget = None if args.limit_only else args.budget  # no training rows: no budget
    print(json.dumps({"size": args.size, "budget": budget, "threads": args.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
