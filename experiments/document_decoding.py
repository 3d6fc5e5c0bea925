"""Document-length decoding (issue 3): translate whole Bible chapters with global vs local attention.

The verses of each test chapter (grouped by their key Book.Chapter.Verse in test.keys) are joined
with spaces into one input line of hundreds of words and translated as one sequence, greedily or
with beam search, with the output cap raised far past the sentence-level default (512 pieces).
Reports this thread's CPU time (run it with OMP_NUM_THREADS=1 so the numbers do not depend on other
processes), split into encoder and decoder time, source/output words per CPU second, milliseconds per
output word and per output piece, and chapter-level sacreBLEU and chrF.

    OMP_NUM_THREADS=1 python experiments/document_decoding.py --model RUN --data DIR [--beam 1]
        [--batch-size 1] [--books Ruth,Joel] [--cap 4096] [--fixed-length] [--out hyps.txt]

--batch-size N translates N chapters at once (a batch of long sequences, as a server would).
--fixed-length never lets a hypothesis end before the output limit (min(ratio · source pieces,
cap)): every model then produces the same number of output pieces, so their speeds compare
without the confound of different output lengths (a model that stops early spreads the encoder's
cost over fewer words); the translations are then meaningless and BLEU is not reported.

--model A --model B ... --paired ROUNDS compares models instead (timing only, with --fixed-length):
each round translates the chapters with every model, back to back in an order that rotates, and
the JSON line gives each model's median decoder time per output piece and, for every model after
the first, the median and quartiles over rounds of A's time ÷ its time in the same round (> 1: it
is faster than A). A shared machine's speed drifts by more than the few per cent that models of
one size differ by at batch 1; rounds side by side do not.

    OMP_NUM_THREADS=1 python experiments/document_decoding.py --model RUN_A --model RUN_B \
        --data DIR --books Ruth --fixed-length --paired 9

DIR holds test.en, test.es and test.keys (`attnmt data bible --out DIR`). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import OrderedDict
from pathlib import Path

import sacrebleu
import torch

from attnmt.data.vocab import EOS
from attnmt.decode.translate import Translator


class Timed:
    """The translator's model with its encoder's CPU time counted and, with ``no_eos``, </s>
    never chosen (hypotheses run to the length limit)."""

    def __init__(self, model, no_eos: bool):
        self.model, self.no_eos, self.encode_cpu = model, no_eos, 0.0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def encode(self, src, src_lengths):
        start = time.thread_time()
        enc = self.model.encode(src, src_lengths)
        self.encode_cpu += time.thread_time() - start
        return enc

    def step(self, prefix, state, enc, need_weights=False):
        logits, state, weights = self.model.step(prefix, state, enc, need_weights)
        if self.no_eos:
            logits[:, EOS] = float("-inf")
        return logits, state, weights


def chapters(data: Path, src: str, tgt: str, books: set[str]) -> OrderedDict[str, tuple[list[str], list[str]]]:
    """Chapter name -> (source verses, reference verses), in corpus order."""
    read = lambda suffix: (data / f"test.{suffix}").read_text(encoding="utf-8").splitlines()
    docs: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
    for key, s, t in zip(read("keys"), read(src), read(tgt)):
        book, chapter = key.split(".")[:2]
        if books and book not in books:
            continue
        doc = docs.setdefault(f"{book}.{chapter}", ([], []))
        doc[0].append(s)
        doc[1].append(t)
    return docs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, action="append",
                   help="training run directory (several with --paired)")
    p.add_argument("--data", required=True, type=Path, help="directory with test.{src,tgt,keys}")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="es")
    p.add_argument("--books", default="", help="comma-separated subset of books, e.g. Ruth,Joel")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1, help="chapters translated together")
    p.add_argument("--fixed-length", action="store_true",
                   help="no hypothesis ends before the output limit (timing only, no BLEU)")
    p.add_argument("--cap", type=int, default=4096, help="maximum output pieces per chapter")
    p.add_argument("--ratio", type=float, default=1.5, help="maximum output pieces per source piece")
    p.add_argument("--out", help="write the chapter translations here")
    p.add_argument("--paired", type=int, default=0, metavar="ROUNDS",
                   help="compare the --model runs in ROUNDS interleaved rounds (needs --fixed-length)")
    args = p.parse_args()
    torch.set_num_threads(1)

    docs = chapters(args.data, args.src, args.tgt, set(filter(None, args.books.split(","))))
    if args.paired:
        if len(args.model) < 2 or not args.fixed_length or args.out:
            p.error("--paired compares two or more --model runs, with --fixed-length, without --out")
        print(json.dumps(paired(args, [" ".join(src) for src, _ in docs.values()])))
        return
    if len(args.model) > 1:
        p.error("several --model runs are compared with --paired ROUNDS")
    args.model = args.model[0]
    translator = Translator.from_run(args.model, device="cpu")
    timed = Timed(translator.model, args.fixed_length)
    translator.model = timed
    sources = [" ".join(src) for src, _ in docs.values()]
    refs = [" ".join(ref) for _, ref in docs.values()]
    hyps, cpu, out_pieces = [], 0.0, 0
    for i in range(0, len(sources), args.batch_size):
        batch = sources[i : i + args.batch_size]
        start = time.thread_time()
        out = translator.translate(batch, beam=args.beam, batch_size=args.batch_size,
                                   max_len_ratio=args.ratio, max_len_cap=args.cap, at_cap="keep")
        cpu += time.thread_time() - start
        hyps += [t[0].text for t in out]
        out_pieces += sum(len(t[0].tgt_pieces) for t in out)
    src_pieces = [len(translator.src_tok.encode(line)) for line in sources]
    out_words = sum(len(h.split()) for h in hyps)
    decoder_cpu = cpu - timed.encode_cpu
    result = {
        "model": args.model, "beam": args.beam, "batch_size": args.batch_size,
        "fixed_length": args.fixed_length, "chapters": len(docs),
        "src_words_mean": round(sum(len(s.split()) for s in sources) / len(sources), 1),
        "src_pieces_mean": round(sum(src_pieces) / len(src_pieces), 1), "src_pieces_max": max(src_pieces),
        "cpu_s": round(cpu, 2), "encoder_cpu_s": round(timed.encode_cpu, 2),
        "decoder_cpu_s": round(decoder_cpu, 2),
        "out_words": out_words, "out_pieces": out_pieces,
        "src_words_per_s": round(sum(len(s.split()) for s in sources) / cpu, 2),
        "out_words_per_s": round(out_words / cpu, 2),
        "ms_per_out_word": round(1000 * cpu / max(out_words, 1), 3),
        "decoder_ms_per_out_piece": round(1000 * decoder_cpu / max(out_pieces, 1), 3),
        "out_ref_length_ratio": round(out_words / sum(len(r.split()) for r in refs), 3),
    }
    if not args.fixed_length:
        result["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        result["chrf"] = round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text("\n".join(hyps) + "\n", encoding="utf-8")


def decoder_ms_per_piece(translator: Translator, sources: list[str], args) -> float:
    """Decoder CPU time per output piece of translating ``sources`` (its model is ``Timed``)."""
    timed = translator.model
    timed.encode_cpu, pieces = 0.0, 0
    start = time.thread_time()
    for i in range(0, len(sources), args.batch_size):
        out = translator.translate(sources[i : i + args.batch_size], beam=args.beam,
                                   batch_size=args.batch_size, max_len_ratio=args.ratio,
                                   max_len_cap=args.cap, at_cap="keep")
        pieces += sum(len(t[0].tgt_pieces) for t in out)
    return 1000 * (time.thread_time() - start - timed.encode_cpu) / max(pieces, 1)


def paired(args, sources: list[str]) -> dict:
    """--paired: every model's time per round, rounds interleaved; ratios against the first."""
    translators = []
    for run in args.model:
        translator = Translator.from_run(run, device="cpu")
        translator.model = Timed(translator.model, no_eos=True)
        translators.append(translator)
    times: list[list[float]] = [[] for _ in translators]
    order = list(range(len(translators)))
    for r in range(args.paired):
        for i in order[r % len(order):] + order[: r % len(order)]:
            times[i].append(decoder_ms_per_piece(translators[i], sources, args))
    result = {"models": args.model, "beam": args.beam, "batch_size": args.batch_size,
              "chapters": len(sources), "rounds": args.paired,
              "decoder_ms_per_out_piece_median": [round(statistics.median(t), 3) for t in times],
              "paired_ratio_to_first": []}
    for t in times[1:]:
        ratios = sorted(a / b for a, b in zip(times[0], t))
        n = len(ratios)
        result["paired_ratio_to_first"].append(
            {"median": round(statistics.median(ratios), 3),
             "quartiles": [round(ratios[n // 4], 3), round(ratios[(3 * n) // 4], 3)]})
    return result


if __name__ == "__main__":
    main()
