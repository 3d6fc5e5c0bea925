"""Sentence-classification data (task: classify) and its label set.

A classification corpus is either a TSV file ``text<TAB>label[<TAB>extra ...]`` (extra columns,
e.g. the number of attractors of an agreement example, are kept for analysis and ignored by
training) or two aligned files ``PREFIX.SRC`` (text) and ``PREFIX.TGT`` (one label per line).
Labels get ids 0..C−1 in sorted order; the set is saved as RUN/labels.txt.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnmt.data.corpus import read_lines
from attnmt.data.vocab import UNK
from attnmt.errors import UserError
from attnmt.files import SMALL_TEXT_BYTES, read_small_text


class LabelSet:
    def __init__(self, labels: list[str]):
        self.labels = list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def build(cls, labels: list[str]) -> LabelSet:
        return cls(sorted(set(labels)))

    def encode(self, label: str, path: str | None = None, line: int | None = None) -> int:
        if label not in self.index:
            raise UserError(f"label {label!r} does not occur in the training data", path, line)
        return self.index[label]

    def __len__(self) -> int:
        return len(self.labels)

    def piece(self, i: int) -> str:
        return self.labels[i]

    def save(self, run_dir: str | os.PathLike, side: str = "tgt") -> None:
        path = Path(run_dir) / "labels.txt"
        tmp = path.with_suffix(".txt.tmp")
        tmp.write_text("".join(x + "\n" for x in self.labels), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> LabelSet:
        path = Path(run_dir) / "labels.txt"
        if not path.exists():
            raise UserError("no labels.txt: not a classification run", str(run_dir))
        text = read_small_text(path, SMALL_TEXT_BYTES, "label list")
        seen: dict[str, int] = {}
        for number, label in enumerate(text.split("\n"), start=1):
            if label in seen:  # a label's id is its position: a second one would never be predicted
                raise UserError(f"duplicate label {label!r} (also line {seen[label]})", str(path), number)
            if label:
                seen[label] = number
        return cls(list(seen))


def read_classification(spec: str, src: str, tgt: str
                        ) -> tuple[list[str], list[str], list[list[str]], str, list[int]]:
    """(texts, labels, extra columns per line, the file holding the labels, line number of each
    example) of a TSV or PREFIX.SRC/.TGT: a bad label is reported as LABEL_FILE:LINE."""
    texts, labels, extras, numbers = [], [], [], []
    if spec.endswith(".tsv") or (os.path.isfile(spec) and not os.path.exists(f"{spec}.{src}")):
        for number, line in enumerate(read_lines(spec), start=1):
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
                raise UserError("expected text<TAB>label", spec, number)
            texts.append(cols[0].strip())
            labels.append(cols[1].strip())
            extras.append(cols[2:])
            numbers.append(number)
        where = spec
    else:
        where = f"{spec}.{src}"
        text_lines, label_lines = read_lines(where), read_lines(f"{spec}.{tgt}")
        if len(text_lines) != len(label_lines):
            raise UserError(f"line counts differ: {where} has {len(text_lines)} lines, "
                            f"{spec}.{tgt} has {len(label_lines)}")
        for number, (x, y) in enumerate(zip(text_lines, label_lines), start=1):
            if not x.strip() and not y.strip():
                continue
            if not x.strip() or not y.strip():
                raise UserError("empty text or label", f"{spec}.{tgt}" if not y.strip() else where, number)
            texts.append(x.strip())
            labels.append(y.strip())
            extras.append([])
            numbers.append(number)
    if not texts:
        raise UserError("no labelled sentences", where)
    return texts, labels, extras, spec if where == spec else f"{spec}.{tgt}", numbers


def encode_inputs(tok, texts: list[str], max_len: int) -> list[list[int]]:
    """Classifier input: each text's token ids cut to ``max_len``, never empty (one <unk>)."""
    return [tok.encode(text)[:max_len] or [UNK] for text in texts]
