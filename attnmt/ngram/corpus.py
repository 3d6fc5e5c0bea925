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
_DELIMS_KEEP_NL = str.maketrans({"\t": " ", "\r": " ", "\0": " "})


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


def flatten(sentences: Iterable[Sequence[int]]) -> np.ndarray:
    """Lay token-id sentences out as one flat ``<s> ... </s> <s> ... </s>`` int64 array."""
    flat = array("q")
    for s in sentences:
        flat.append(BOS)
        flat.extend(s)
        flat.append(EOS)
    return np.frombuffer(flat, dtype=np.int64).copy() if len(flat) else np.zeros(0, np.int64)


def _read_blocks(path: Path, size: int = 1 << 25) -> Iterator[tuple[int, str]]:
    """(number of the block's first line, text) for blocks of whole lines, UTF-8 checked."""
    first_line = 1
    rest = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(size)
            data = rest + chunk
            if not chunk:
                cut = len(data)
            else:
                cut = data.rfind(b"\n") + 1
            block, rest = data[:cut], data[cut:]
            if block:
                try:
                    text = block.decode("utf-8")
                except UnicodeDecodeError as err:
                    line = first_line + block.count(b"\n", 0, err.start)
                    raise UserError(f"invalid UTF-8 ({err.reason})", str(path), line) from None
                yield first_line, text
                first_line += block.count(b"\n")
            if not chunk:
                return


def _words_to_ids(path: Path) -> tuple[list[str], np.ndarray]:
    """Whitespace words of a file as flat ids, vectorised per block (no per-line Python loop)."""
    # Internal ids: '' (split artefact) 0, line break 1, then the specials, then new words.
    table = {"": 0, "\n": 1, "<unk>": 2, "<s>": 3, "</s>": 4}
    to_model = [-1, -1, UNK, BOS, EOS]
    parts: list[np.ndarray] = []
    n_lines = 0
    for first_line, text in _read_blocks(path):
        words = text.translate(_DELIMS_KEEP_NL).replace("\n", " \n ").split(" ")
        internal = np.fromiter((table.setdefault(w, len(table)) for w in words), np.int64,
                               count=len(words))
        bad = np.nonzero((internal == 3) | (internal == 4))[0]
        if len(bad):
            line = first_line + int(np.count_nonzero(internal[: bad[0]] == 1))
            raise UserError(f"{words[bad[0]]} may not occur inside a sentence", str(path), line)
        n_lines += text.count("\n") + (0 if text.endswith("\n") else 1)
        parts.append(internal[internal != 0])
    if n_lines == 0:
        raise UserError("empty corpus: no lines to estimate from", str(path))
    internal = np.concatenate(parts)
    words_by_internal = list(table)
    to_model_arr = np.array(to_model + list(range(4, 4 + len(table) - 5)), np.int64)
    ids = to_model_arr[internal]
    # Sentence layout: <s> before each line, a line break becomes </s> <s>, a final </s>.
    is_break = internal == 1
    if len(internal) and is_break[-1]:
        ids, is_break = ids[:-1], is_break[:-1]
    flat = np.empty(len(ids) + int(is_break.sum()) + 2, np.int64)
    dest = np.arange(len(ids)) + np.cumsum(is_break) + 1
    flat[0], flat[-1] = BOS, EOS
    flat[dest] = ids
    flat[dest[is_break]] = BOS
    flat[dest[is_break] - 1] = EOS
    vocab = list(SPECIALS) + words_by_internal[5:]
    return vocab, flat


def read_text_corpus(path: str | os.PathLike, tokenizer=None) -> tuple[list[str], np.ndarray]:
    """(vocabulary, flat token array) of a text file: whitespace words, or ``tokenizer.encode``."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", str(path))
    if tokenizer is None:
        return _words_to_ids(path)
    flat = array("q")
    V = len(tokenizer)
    words = [tokenizer.piece(i) for i in range(V)]
    words[: len(SPECIALS)] = SPECIALS
    for _, line in read_lines(path):
        flat.append(BOS)
        flat.extend(i if 0 <= i < V and i not in (PAD, BOS, EOS) else UNK
                    for i in tokenizer.encode(line))
        flat.append(EOS)
    if not flat:
        raise UserError("empty corpus: no lines to estimate from", str(path))
    return words, np.frombuffer(flat, dtype=np.int64).copy()
