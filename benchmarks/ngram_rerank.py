"""What n-gram reranking of beam-5 n-best lists does to Bible test BLEU (issue 38, item 4).

Given a trained Bible run (en→es), builds a word 5-gram on the training Spanish with
`attnmt ngram build`, writes beam-5 5-best lists of dev and test with `attnmt translate --nbest 5`,
tunes the rerank weights (search score, length, the 5-gram; with --rev also a reverse es→en run's
log P(source | hypothesis), the noisy channel) on dev BLEU with `attnmt rerank --tune`, reranks
test with them, and compares the test 1-best (the first hypothesis of each list) with the reranked
output by `attnmt score --paired-bs`.

    python benchmarks/ngram_rerank.py --model RUN --data data/bible [--rev REV_RUN] [--out DIR]

Everything goes to DIR (default exp/ngram_rerank/<run name>); the 5-gram and the n-best lists are
reused when present. Prints one JSON line (BLEU before/after on dev and test, the weights, the
paired bootstrap p-value, seconds per step) and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATTNMT = [sys.executable, "-m", "attnmt"]


def sh(cmd: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"ngram_rerank: {' '.join(cmd[2:4])} failed: {done.stderr.strip()[-400:]}")
    return done


def timed(seconds: dict, name: str, cmd: list[str], output: Path | None = None) -> subprocess.CompletedProcess | None:
    """Run ``cmd`` unless ``output`` already exists; its wall time goes to seconds[name]."""
    if output is not None and output.exists():
        return None
    start = time.perf_counter()
    done = sh(cmd)
    seconds[name] = round(time.perf_counter() - start, 1)
    return done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a trained Bible en→es run directory")
    p.add_argument("--data", default="data/bible", help="attnmt data bible --out DIR")
    p.add_argument("--rev", help="a reverse-direction (es→en) run: adds the noisy-channel feature")
    p.add_argument("--order", type=int, default=5, help="n-gram order")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--nbest", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--stop", default="best", choices=["best", "complete"],
                   help="translate --stop: complete waits for --beam finished hypotheses (fuller lists)")
    p.add_argument("--out", help="work directory (default exp/ngram_rerank/<run name>)")
    args = p.parse_args()
    data = Path(args.data)
    out = Path(args.out) if args.out else ROOT / "exp" / "ngram_rerank" / Path(args.model).name
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict = {}
    lm = out / f"es.{args.order}gram.ngram"
    timed(seconds, "ngram_build", [*ATTNMT, "ngram", "build", "--order", str(args.order), "--input",
                                   str(data / "train.es"), "--binary", str(lm), "--no-progress"], lm)
    for split in ("dev", "test"):
        nbest = out / f"{split}.nbest"
        timed(seconds, f"translate_{split}", [*ATTNMT, "translate", "--model", args.model, "-i",
                                              str(data / f"{split}.en"), "-o", str(nbest), "--beam", str(args.beam),
                                              "--nbest", str(args.nbest), "--batch-size", str(args.batch_size),
                                              "--stop", args.stop], nbest)
    features = ["score", "length", f"ngram={lm}"] + ([f"rev={args.rev}"] if args.rev else [])
    weights = out / "weights.json"
    timed(seconds, "tune", [*ATTNMT, "rerank", "--tune", "--nbest", str(out / "dev.nbest"), "--ref",
                            str(data / "dev.es"), "--src", str(data / "dev.en"), "--features", *features,
                            "--weights-out", str(weights)])
    reranked = out / "test.reranked.es"
    timed(seconds, "rerank_test", [*ATTNMT, "rerank", "--nbest", str(out / "test.nbest"), "--weights", str(weights),
                                   "--src", str(data / "test.en"), "-o", str(reranked)])
    # the baseline: the first hypothesis of each test list (the beam's best), through the same reader
    sys.path.insert(0, str(ROOT))
    from attnmt.eval.nbest import read_nbest

    sources = (data / "test.en").read_text(encoding="utf-8").splitlines()
    first = out / "test.first.es"
    groups = read_nbest(out / "test.nbest", len(sources))
    first.write_text("".join((g[0].text if g else "") + "\n" for g in groups), encoding="utf-8")
    listed = [len(g) for g in groups if g]
    paired = json.loads(sh([*ATTNMT, "score", "--hyp", str(first), "--hyp", str(reranked), "--ref",
                            str(data / "test.es"), "--paired-bs", "--json"]).stdout)
    tuned = json.loads(weights.read_text(encoding="utf-8"))
    base, new = paired["systems"]
    result = {
        "model": args.model, "rev": args.rev, "order": args.order, "beam": args.beam, "nbest": args.nbest,
        "stop": args.stop, "hypotheses_per_line": round(sum(listed) / len(listed), 2),
        "features": tuned["features"], "weights": tuned["weights"],
        "dev_bleu_first": tuned["dev_bleu"]["first"], "dev_bleu_reranked": tuned["dev_bleu"]["reranked"],
        "test_bleu_first": base["bleu"]["score"], "test_bleu_reranked": new["bleu"]["score"],
        "test_bleu_delta": round(new["bleu"]["score"] - base["bleu"]["score"], 2),
        "test_bleu_ci": [base["bleu"]["ci"], new["bleu"]["ci"]], "p_value_bleu": new["bleu"]["p_value"],
        "test_chrf_first": base["chrf"]["score"], "test_chrf_reranked": new["chrf"]["score"],
        "p_value_chrf": new["chrf"]["p_value"], "signature": paired["signatures"]["bleu"], "seconds": seconds,
    }
    print(json.dumps(result))
    print(f"n-gram reranking of beam-{args.beam} {args.nbest}-best lists: test BLEU {result['test_bleu_first']} -> "
          f"{result['test_bleu_reranked']} ({result['test_bleu_delta']:+.2f}, paired bootstrap p = "
          f"{result['p_value_bleu']}); dev {result['dev_bleu_first']} -> {result['dev_bleu_reranked']}")


if __name__ == "__main__":
    main()
