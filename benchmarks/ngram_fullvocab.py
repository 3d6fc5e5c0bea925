"""Full-vocabulary n-gram distributions per second: ``NgramLM.next_token_logprobs`` vs a loop over
the ``kenlm`` module's state API (BaseScore of every vocabulary word for each context).

    python benchmarks/ngram_fullvocab.py [--train TEXT] [--vocab 10000] [--contexts 1000]
        [--order 5] [--kenlm-contexts 100] [--device cpu|cuda] [--threads 1]

Without --train a synthetic Zipf corpus (1 M tokens) is used. The vocabulary is the --vocab most
frequent words (specials included; the rest -> <unk>), as a neural model's would be. The KenLM loop
is timed on --kenlm-contexts contexts (it is slow) and its rate compared with ours; the two
distributions are also checked against each other. Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnmt.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from attnmt.ngram import NgramLM
from attnmt.ngram.corpus import read_lines, split_words
from attnmt.ngram.query import LN10


def corpus_lines(path: str | None, rng) -> list[list[str]]:
    if path:
        return [split_words(line) for _, line in read_lines(path)]
    ranks = np.arange(1, 30001)
    probs = 1.0 / ranks
    probs /= probs.sum()
    words = rng.choice(30000, size=1_000_000, p=probs)
    cuts = np.cumsum(rng.integers(5, 30, size=100_000))
    cuts = cuts[cuts < len(words)]
    return [[f"w{i}" for i in s] for s in np.split(words, cuts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train")
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--contexts", type=int, default=1000)
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--kenlm-contexts", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)

    lines = corpus_lines(args.train, rng)
    freq = Counter(w for s in lines for w in s)
    top = [w for w, _ in freq.most_common(args.vocab - len(SPECIALS)) if w not in SPECIALS]
    vocab = list(SPECIALS) + top[: args.vocab - len(SPECIALS)]
    index = {w: i for i, w in enumerate(vocab) if i != PAD}
    sents = [[index.get(w, UNK) for w in s] for s in lines]
    start = time.perf_counter()
    lm = NgramLM.estimate(sents, vocab, order=args.order)
    est_s = time.perf_counter() - start

    # Contexts: the n-1 tokens before random positions of the training stream (<s> included).
    flat = np.concatenate([[BOS, *s, EOS] for s in sents[:20000]])
    n1 = args.order - 1
    pos = rng.integers(n1, len(flat), size=args.contexts)
    ctx = torch.from_numpy(np.stack([flat[p - n1 : p] for p in pos]))

    lm.to(args.device)
    ctx_dev = ctx.to(args.device)
    lm.next_token_logprobs(ctx_dev)  # builds the index, warms up
    times = []
    for _ in range(args.repeats):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = lm.next_token_logprobs(ctx_dev)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    ours_rate = args.contexts / min(times)

    result = {"vocab": lm.vocab_size, "order": args.order, "contexts": args.contexts,
              "device": args.device, "threads": args.threads, "estimate_s": round(est_s, 2),
              "ngrams": [len(t.word) for t in lm.tables],
              "ours_s_per_batch": round(min(times), 4), "ours_dists_per_s": round(ours_rate, 1)}
    try:
        import kenlm
    except ImportError:
        kenlm = None
    if kenlm is not None:
        with tempfile.TemporaryDirectory() as tmp:
            lm.to_arpa(Path(tmp) / "m.arpa")
            model = kenlm.Model(str(Path(tmp) / "m.arpa"))
        k = min(args.kenlm_contexts, args.contexts)
        words = vocab
        ken = np.zeros((k, len(words)), np.float32)
        t = time.perf_counter()
        for b in range(k):
            row = ctx[b].tolist()
            state, nxt = kenlm.State(), kenlm.State()
            if BOS in row:
                row = row[len(row) - row[::-1].index(BOS):]
                model.BeginSentenceWrite(state)
            else:
                model.NullContextWrite(state)
            for w in row:
                model.BaseScore(state, words[w], nxt)
                state, nxt = nxt, state
            for i, w in enumerate(words):
                ken[b, i] = model.BaseScore(state, w, nxt)
        ken_s = time.perf_counter() - t
        ken_rate = k / ken_s
        ours_k = out[:k].cpu().numpy() / LN10
        keep = np.ones(len(words), bool)
        keep[[PAD, BOS]] = False
        result.update({"kenlm_contexts": k, "kenlm_s": round(ken_s, 2),
                       "kenlm_dists_per_s": round(ken_rate, 2),
                       "speedup": round(ours_rate / ken_rate, 1),
                       "max_abs_diff_log10": float(np.abs(ours_k - ken)[:, keep].max())})
    print(json.dumps(result))
    line = (f"full-vocab ({lm.vocab_size}) {args.order}-gram distributions: ours "
            f"{ours_rate:,.0f}/s on {args.device} ({args.threads} thread(s))")
    if "speedup" in result:
        line += (f" vs kenlm BaseScore loop {result['kenlm_dists_per_s']:,.1f}/s: "
                 f"{result['speedup']:,.0f}x; max |diff| {result['max_abs_diff_log10']:.1e} log10")
    print(line)


if __name__ == "__main__":
    main()
