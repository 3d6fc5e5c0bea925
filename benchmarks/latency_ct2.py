"""One sentence at a time to a resident engine: attnmt's Python API against CTranslate2's
Translator on the same weights (a server's latency per request, without the HTTP layer; issue 37).

    python benchmarks/latency_ct2.py --run exp/race-tf/transformer-256/attnmt --data exp/race-tf/data
        [--lines 200] [--threads 1] [--compute-type int8] [--int8]

Both engines are loaded once in this process, each on ``--threads`` threads (attnmt:
``attnmt.load(RUN)``, beam 5, bfloat16 where the CPU has it, ``--int8``: its 8-bit products;
CTranslate2: ``--compute-type``, beam 5, attnmt's length rule 2|x| + 10), and translate the first
``--lines`` test sentences one request each, the engines taking turns sentence by sentence so
that the machine's drift hits both alike. CTranslate2 reads RUN/ct2, made when missing from the
run's last checkpoint by ``attnmt export --format ctranslate2``.

Reports per engine the median, 90th percentile and mean milliseconds per request and the words
written; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ct2_rounds import exported  # noqa: E402
from peer_race import attnmt_env  # noqa: E402
from race_peers import RaceError  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def summary(ms: list[float], words: int) -> dict:
    return {"median_ms": round(statistics.median(ms), 1), "p90_ms": round(percentile(ms, 0.9), 1),
            "mean_ms": round(statistics.mean(ms), 1), "words": words}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="an attnmt Transformer run (peer_race.py's OUT/transformer-D/attnmt)")
    ap.add_argument("--data", required=True, help="peer_race.py's data folder (test.en, test.sp.en)")
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compute-type", default="int8", help="CTranslate2's compute type")
    ap.add_argument("--int8", action="store_true", help="attnmt's 8-bit products (translate --int8)")
    args = ap.parse_args(argv)
    run_dir, data = Path(args.run), Path(args.data)
    missing = [str(p) for p in (run_dir / "config.yaml", run_dir / "tgt.spm.model", data / "test.en", data / "test.sp.en")
               if not p.is_file()]
    if missing or args.lines < 1:
        print(f"latency_ct2: error: {'missing ' + ', '.join(missing) if missing else '--lines must be >= 1'}",
              file=sys.stderr)
        return 2
    import ctranslate2
    import sentencepiece as spm

    import attnmt
    from attnmt.decode.options import SearchOptions

    try:
        ct2_dir = exported(run_dir, run_dir / "ct2_export.log", attnmt_env(args.threads))
    except RaceError as err:
        print(f"latency_ct2: error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    model = attnmt.load(run_dir, checkpoint="last", device="cpu")
    options = SearchOptions(beam=5, precision="auto", int8=args.int8, workers=1)
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=args.compute_type,
                                        intra_threads=args.threads, inter_threads=1)
    target = spm.SentencePieceProcessor(model_file=str(run_dir / "tgt.spm.model"))  # CTranslate2's pieces as words
    text = (data / "test.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    pieces = [line.split() for line in (data / "test.sp.en").read_text(encoding="utf-8").splitlines()[: args.lines]]
    for i in range(3):  # warm both up (first calls pack weights and make kernels)
        model.translate([text[i]], options)
        translator.translate_batch([pieces[i]], beam_size=5, max_decoding_length=2 * len(pieces[i]) + 10)
    times: dict[str, list[float]] = {"attnmt": [], "ctranslate2": []}
    words = {"attnmt": 0, "ctranslate2": 0}
    for line, src in zip(text, pieces):
        start = time.perf_counter()
        out = model.translate([line], options)[0].text
        times["attnmt"].append((time.perf_counter() - start) * 1e3)
        words["attnmt"] += len(out.split())
        start = time.perf_counter()
        hyp = translator.translate_batch([src], beam_size=5, max_decoding_length=2 * len(src) + 10)[0].hypotheses[0]
        times["ctranslate2"].append((time.perf_counter() - start) * 1e3)
        words["ctranslate2"] += len(target.decode(hyp).split())
    result = {"run": str(run_dir), "lines": len(text), "threads": args.threads, "compute_type": args.compute_type,
              "int8": args.int8, **{e: summary(times[e], words[e]) for e in times}}
    result["median_ratio"] = round(result["ctranslate2"]["median_ms"] / result["attnmt"]["median_ms"], 3)
    print(f"attnmt {result['attnmt']['median_ms']} ms (p90 {result['attnmt']['p90_ms']}) per sentence, "
          f"CTranslate2 {result['ctranslate2']['median_ms']} ms (p90 {result['ctranslate2']['p90_ms']}): "
          f"{result['median_ratio']}x (> 1: attnmt faster)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
