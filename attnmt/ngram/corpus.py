"""Reading training text into one flat int64 array of ``<s> w1 .. wm </s>`` sentences.

One line is one sentence; an empty line is the empty sentence ``<s> </s>`` (as lmplz counts it).
Whitespace words are split on space, tab, CR and NUL exactly as lmplz does, so vocabularies agree.
``<s>`` and ``</s>`` inside the text are refused (lmplz refuses them too); ``<unk>`` is counted as
the <unk> token (lmplz refuses it), which is what a neural vocabulary's UNK id needs.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from attnmt.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from attnmt.errors import UserError

_DELIMS = str.maketrans({"\t": " ", "\r": " ", "\0": " ", "\n": " "})


def split_words(line: str) -> list[str]:
    """Whitespace words as lmplz and KenLM's ARPA reader see them."""
    return [w for w in line.translate(_DELIMS).split(" ") if w]


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file; invalid UTF-8 -> UserError file:line."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", str(path))
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                yield lineno, raw.decode("utf-8").rstrip("\n")
            except UnicodeDecodeError as err:
                raise UserError(f"invalid UTF-8 ({err.reason})", str(path), lineno) from None


class WordVocab:
    """String -> id for whitespace words; ids 0..3 are the specials, the rest in order of arrival."""

    def __init__(self, words: Sequence[str] | None = None):
        self.words: list[str] = list(words) if words is not None else list(SPECIALS)
        self.index = {w: i for i, w in enumerate(self.words) if i != PAD}

    def add(self, words: list[str], path: str, lineno: int) -> list[int]:
        index = self.index
        ids = []
        for w in words:
            i = index.get(w)
            if i is None:
                i = index[w] = len(self.words)
                self.words.append(w)
            elif i in (BOS, EOS):
                raise UserError(f"{w} may not occur inside a sentence", path, lineno)
            ids.append(i)
        return ids

    def lookup(self, words: list[str]) -> list[int]:
        return [self.index.get(w, UNK) for w in words]


def flatten(sentences: Iterable[Sequence[int]]) -> np.ndarray:
    """Lay token-id sentences out as one flat ``<s> ... </s> <s> ... </s>`` int64 array."""
    flat = array("q")
    for s in sentences:
        flat.append(BOS)
        flat.extend(s)
        flat.append(EOS)
    return np.frombuffer(flat, dtype=np.int64).copy() if len(flat) else np.zeros(0, np.int64)


def read_text_corpus(path: str | os.PathLike, tokenizer=None) -> tuple[list[str], np.ndarray]:
    """(vocabulary, flat token array) of a text file: whitespace words, or ``tokenizer.encode``."""
    name = str(path)
    flat = array("q")
    if tokenizer is None:
        vocab = WordVocab()
        for lineno, line in read_lines(path):
            flat.append(BOS)
            flat.extend(vocab.add(split_words(line), name, lineno))
            flat.append(EOS)
        words = vocab.words
    else:
        V = len(tokenizer)
        words = [tokenizer.piece(i) for i in range(V)]
        words[: len(SPECIALS)] = SPECIALS
        for _, line in read_lines(path):
            flat.append(BOS)
            flat.extend(i if 0 <= i < V and i not in (PAD, BOS, EOS) else UNK
                        for i in tokenizer.encode(line))
            flat.append(EOS)
    if not flat:
        raise UserError("empty corpus: no lines to estimate from", name)
    return words, np.frombuffer(flat, dtype=np.int64).copy()
