"""Document-length decoding (issue 3): translate whole Bible chapters with global vs local attention.

The verses of each test chapter (grouped by their key Book.Chapter.Verse in test.keys) are joined
with spaces into one input line of hundreds of words and translated as one sequence, greedily or
with beam search, with the output cap raised far past the sentence-level default (512 pieces).
Reports this thread's CPU time (run it with OMP_NUM_THREADS=1 so the numbers do not depend on other
processes), source/output words per CPU second and chapter-level sacreBLEU and chrF.

    OMP_NUM_THREADS=1 python experiments/document_decoding.py --model RUN --data DIR [--beam 1]
        [--books Ruth,Joel] [--cap 4096] [--out hyps.txt]

DIR holds test.en, test.es and test.keys (`attnmt data bible --out DIR`). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import OrderedDict
from pathlib import Path

import sacrebleu
import torch

from attnmt.decode.translate import Translator


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
    p.add_argument("--model", required=True, help="training run directory")
    p.add_argument("--data", required=True, type=Path, help="directory with test.{src,tgt,keys}")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="es")
    p.add_argument("--books", default="", help="comma-separated subset of books, e.g. Ruth,Joel")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--cap", type=int, default=4096, help="maximum output pieces per chapter")
    p.add_argument("--ratio", type=float, default=1.5, help="maximum output pieces per source piece")
    p.add_argument("--out", help="write the chapter translations here")
    args = p.parse_args()
    torch.set_num_threads(1)

    docs = chapters(args.data, args.src, args.tgt, set(filter(None, args.books.split(","))))
    translator = Translator.from_run(args.model, device="cpu")
    sources = [" ".join(src) for src, _ in docs.values()]
    refs = [" ".join(ref) for _, ref in docs.values()]
    hyps, cpu = [], 0.0
    for line in sources:  # one chapter at a time: the cost of one long sequence, no batching
        start = time.thread_time()
        hyps.append(translator.translate([line], beam=args.beam, batch_size=1, max_len_ratio=args.ratio,
                                         max_len_cap=args.cap)[0][0].text)
        cpu += time.thread_time() - start
    src_pieces = [len(translator.src_tok.encode(line)) for line in sources]
    result = {
        "model": args.model, "beam": args.beam, "chapters": len(docs),
        "src_words_mean": round(sum(len(s.split()) for s in sources) / len(sources), 1),
        "src_pieces_mean": round(sum(src_pieces) / len(src_pieces), 1), "src_pieces_max": max(src_pieces),
        "cpu_s": round(cpu, 2),
        "src_words_per_s": round(sum(len(s.split()) for s in sources) / cpu, 2),
        "out_words_per_s": round(sum(len(h.split()) for h in hyps) / cpu, 2),
        "out_ref_length_ratio": round(sum(len(h.split()) for h in hyps) / sum(len(r.split()) for r in refs), 3),
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text("\n".join(hyps) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
