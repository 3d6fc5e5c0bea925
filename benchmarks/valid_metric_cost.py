"""What one validation costs by train.valid_metric: dev perplexity vs dev BLEU (greedy, beams).

Loads a trained Bible run (the `make demo` model by default; trains it first with
``configs/demo.yaml`` for ``--train-time`` seconds when the run has no checkpoint), then times, on
the Bible dev set (``--data``/dev.{en,es}), one validation as the trainer runs it
(attnmt/train/validation.py): teacher-forced ppl, and BLEU of the dev translated with each of
``--beams`` (1 = greedy), every sentence or the first ``--max-sentences``. Also says what share of
a run that is at one validation every ``--valid-every`` updates, from the run's own seconds per
update (its log.jsonl).

    attnmt data bible --out data/bible
    python benchmarks/valid_metric_cost.py --run runs/demo --data data/bible --beams 1,2,4 --threads 2
    python benchmarks/valid_metric_cost.py --run runs/demo --max-sentences 500 --valid-every 500

Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seconds_per_update(run: Path) -> float | None:
    """Training seconds per update of the run (its log's last train record)."""
    records = [json.loads(x) for x in (run / "log.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    train = [r for r in records if r.get("event") == "train" and r.get("step")]
    return train[-1]["elapsed"] / train[-1]["step"] if train else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="runs/demo", help="a trained translation run (trained if absent)")
    ap.add_argument("--data", default="data/bible", help="folder with dev.en and dev.es")
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"), help="config if --run must be trained")
    ap.add_argument("--train-time", type=float, default=680, help="training budget (s) if --run must be trained")
    ap.add_argument("--beams", default="1,2,4", help="beam sizes to time BLEU validation with (1 = greedy)")
    ap.add_argument("--max-sentences", type=int, default=0, help="train.valid_max_sentences (0 = all)")
    ap.add_argument("--valid-every", type=int, default=500, help="updates between validations, for the share")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    run = Path(args.run)
    if not (run / "checkpoints" / "LAST").exists():
        subprocess.run([sys.executable, "-m", "attnmt", "train", args.config, "--out", str(run),
                        "--max-time", str(args.train_time), "--set", f"data.train={args.data}/train",
                        "--set", f"data.dev={args.data}/dev"], check=True, cwd=ROOT)

    import torch

    from attnmt.data.batching import encode_corpus
    from attnmt.data.corpus import read_parallel
    from attnmt.runs.loader import load_run
    from attnmt.train.training import perplexity
    from attnmt.train.validation import dev_score

    torch.set_num_threads(args.threads)
    loaded = load_run(run, device="cpu")
    model, cfg, src_tok, tgt_tok = loaded.model, loaded.cfg, loaded.src_tok, loaded.tgt_tok
    src_lines, tgt_lines, _ = read_parallel(f"{args.data}/dev", cfg.data.src, cfg.data.tgt)
    if cfg.data.lowercase:
        src_lines, tgt_lines = [x.lower() for x in src_lines], [x.lower() for x in tgt_lines]
    src_ids = encode_corpus(src_tok, src_lines, cfg.data.reverse_source)
    tgt_ids = encode_corpus(tgt_tok, tgt_lines)
    model.train()  # the trainer validates a model in training mode; both switch to eval and back

    start = time.perf_counter()
    ppl = perplexity(model, src_ids, tgt_ids, loaded.device)
    out = {"run": str(run), "sentences": len(src_lines), "ppl": round(ppl["ppl"], 3),
           "ppl_seconds": round(time.perf_counter() - start, 2), "threads": args.threads}
    cfg.train.valid_metric, cfg.train.valid_max_sentences = "bleu", args.max_sentences
    for beam in [int(b) for b in args.beams.split(",")]:
        cfg.train.valid_beam = beam
        start = time.perf_counter()
        scored = dev_score(model, cfg, src_tok, tgt_tok, loaded.device, src_lines, tgt_lines)
        out[f"bleu_beam{beam}"] = scored["bleu"]
        out[f"bleu_beam{beam}_seconds"] = round(time.perf_counter() - start, 2)
        out["bleu_sentences"] = scored["sentences"]
    per_update = seconds_per_update(run)
    if per_update:
        train_s = per_update * args.valid_every
        out["train_seconds_per_validation_interval"] = round(train_s, 1)
        for key in [k for k in out if k.endswith("_seconds")]:
            out[key.replace("_seconds", "_share")] = round(out[key] / (out[key] + train_s), 3)
    print(json.dumps(out))
    beams = ", ".join(f"beam {k[9:-8]} {out[k]} s" for k in out if k.startswith("bleu_beam") and k.endswith("_seconds"))
    share = (f"; greedy BLEU is {100 * out['bleu_beam1_share']:.1f} % of a run validating every "
             f"{args.valid_every} updates") if "bleu_beam1_share" in out else ""
    print(f"valid_metric_cost: ppl {out['ppl_seconds']} s vs BLEU {beams} on {out['bleu_sentences']} dev "
          f"sentences ({args.threads} threads){share}")


if __name__ == "__main__":
    main()
