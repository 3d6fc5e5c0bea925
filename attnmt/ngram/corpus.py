"""Reading training text into one flat int64 array of ``<s> w1 .. wm </s>`` sentences.

One line is one sentence; an empty line is the empty sentence ``<s> </s>`` (as lmplz counts it).
Whitespace words are split on space, tab, CR and NUL exactly as lmplz does, so vocabularies agree.
``<s>`` and ``</s>`` inside the text are refused (lmplz refuses them too); ``<unk>`` is counted as
the <unk> token (lmplz refuses it), which is what a neural vocabulary's UNK id needs.
"""

from __future__ import annotations

import codecs
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from attnmt.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from attnmt.errors import UserError
from attnmt.files import check_regular, open_regular

_DELIMS = str.maketrans({"\t": " ", "\r": " ", "\0": " ", "\n": " "})
# the same on UTF-8 bytes, where it is a fast table lookup (no ASCII byte occurs inside a
# multi-byte character, so this never touches one)
_BYTE_DELIMS_KEEP_NL = bytes.maketrans(b"\t\r\0", b"   ")


def split_words(line: str) -> list[str]:
    """Whitespace words as lmplz and KenLM's ARPA reader see them."""
    return [w for w in line.translate(_DELIMS).split(" ") if w]


def check_file(path: Path) -> None:
    check_regular(path, "text file")


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file; invalid UTF-8 -> UserError file:line.
    A byte-order mark at the start of the file is dropped (it is no part of the first word)."""
    path = Path(path)
    with open_regular(path, "text file") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
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


def _read_blocks(path: Path, size: int = 1 << 25) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, bytes) for blocks of whole lines, UTF-8 checked, with
    tab, CR and NUL turned into spaces."""
    first_line = 1
    rest = b""
    with open_regular(path, "text file") as f:
        if f.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:  # a byte-order mark is no word
            f.seek(0)
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
                    block.decode("utf-8")
                except UnicodeDecodeError as err:
                    line = first_line + block.count(b"\n", 0, err.start)
                    raise UserError(f"invalid UTF-8 ({err.reason})", str(path), line) from None
                yield first_line, block.translate(_BYTE_DELIMS_KEEP_NL)
                first_line += block.count(b"\n")
            if not chunk:
                return


_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(9)], np.uint64)


def _short_key(word: bytes) -> int:
    return int.from_bytes(word, "little")


class WordIds:
    """Vocabulary ids of the whitespace words of text blocks, without a Python lookup per word.

    A word of at most 8 bytes is its bytes read as one little-endian uint64 (exact: a word holds
    no NUL byte), found by binary search among the sorted keys of the known words; longer words
    (rare) go through a dict. New words get the next ids in order of first occurrence, after the
    specials, as a dict.setdefault loop over the words would give them.
    """

    def __init__(self):
        self.words: list[str] = list(SPECIALS)
        specials = {b"<unk>": UNK, b"<s>": BOS, b"</s>": EOS}
        keys = np.array([_short_key(w) for w in specials], np.uint64)
        order = np.argsort(keys)
        self.keys, self.ids = keys[order], np.array(list(specials.values()), np.int64)[order]
        self.long: dict[str, int] = {}

    def block(self, data: bytes, first_line: int, path: Path) -> np.ndarray:
        """Flat ``<s> .. </s>`` ids (int64) of a block of whole lines (separators: space, newline)."""
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        inside = (b != 32) & (b != 10)
        starts_word = inside.copy()
        starts_word[1:] &= ~inside[:-1]
        start = np.flatnonzero(starts_word)
        ends_word = inside.copy()
        ends_word[:-1] &= ~inside[1:]
        length = np.flatnonzero(ends_word) + 1 - start
        ids = np.empty(len(start), np.int64)
        short = np.flatnonzero(length <= 8)
        padded = np.zeros(n + 8, np.uint8)
        padded[:n] = b
        eight = np.ndarray((n,), np.uint64, padded, 0, (1,))  # 8 bytes from every offset
        keys = eight[start[short]] & _MASKS[length[short]]
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[at] == keys
        ids[short[found]] = self.ids[at[found]]
        # words not seen before: short ones by key, long ones by text, numbered in block order
        missing = short[~found]
        new_keys, first, inverse = np.unique(keys[~found], return_index=True, return_inverse=True)
        long = np.flatnonzero(length > 8).tolist()
        long_text = [data[s : s + m].decode("utf-8") for s, m in
                     zip(start[long].tolist(), length[long].tolist())]
        new_long: dict[str, int] = {}
        for i, w in zip(long, long_text):
            if w not in self.long and w not in new_long:
                new_long[w] = i
        texts = [k.to_bytes(8, "little").rstrip(b"\0").decode("utf-8")
                 for k in new_keys.tolist()] + list(new_long)
        occurs = np.concatenate([missing[first], np.array(list(new_long.values()), np.int64)])
        number = np.empty(len(texts), np.int64)
        number[np.argsort(occurs)] = len(self.words) + np.arange(len(texts))
        self.words.extend(texts[i] for i in np.argsort(occurs).tolist())
        short_ids = number[: len(new_keys)]
        self.long.update(zip(texts[len(new_keys) :], number[len(new_keys) :].tolist()))
        ids[missing] = short_ids[inverse]
        ids[long] = [self.long[w] for w in long_text]
        if len(new_keys):
            keys = np.concatenate([self.keys, new_keys])
            order = np.argsort(keys)
            self.keys, self.ids = keys[order], np.concatenate([self.ids, short_ids])[order]
        bad = np.flatnonzero((ids == BOS) | (ids == EOS))
        if len(bad):
            i = int(bad[0])
            line = first_line + int(np.count_nonzero(b[: start[i]] == 10))
            raise UserError(f"{self.words[ids[i]]} may not occur inside a sentence", str(path),
                            line)
        # the tokens in text order: words and line breaks
        events = np.flatnonzero(starts_word | (b == 10))
        is_break = b[events] == 10
        stream = np.zeros(len(events), np.int64)
        stream[~is_break] = ids
        return _layout(stream, is_break)


class TextBlocks:
    """A text file as blocks of flat ``<s> w1 .. wm </s>`` id arrays (int64), read once, in order.

    Whitespace words get ids in order of first occurrence after the specials (vectorised per
    block of lines: no per-line Python loop); with ``tokenizer`` the ids are its pieces.
    ``vocab`` is complete once ``blocks()`` is exhausted. Concatenating the blocks gives exactly
    the whole-file layout: blocks end at line ends.
    """

    def __init__(self, path: str | os.PathLike, tokenizer=None, block_tokens: int = 1 << 20,
                 block_bytes: int = 1 << 22):
        self.path = Path(path)
        check_file(self.path)
        self.tokenizer = tokenizer
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes
        self._ids = WordIds()
        if tokenizer is not None:
            words = [tokenizer.piece(i) for i in range(len(tokenizer))]
            words[: len(SPECIALS)] = SPECIALS
            self._vocab: list[str] | None = words

    @property
    def vocab(self) -> list[str]:
        if self.tokenizer is not None:
            return self._vocab
        return list(self._ids.words)

    def blocks(self) -> Iterator[np.ndarray]:
        if self.tokenizer is None:
            yield from self._word_blocks()
        else:
            yield from self._piece_blocks()

    def _word_blocks(self) -> Iterator[np.ndarray]:
        n_lines, words = 0, False
        for first_line, data in _read_blocks(self.path, self.block_bytes):
            n_lines += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            block = self._ids.block(data, first_line, self.path)
            words = words or bool(np.any((block != BOS) & (block != EOS)))
            yield block
        if n_lines == 0:
            raise UserError("empty corpus: no lines to estimate from", str(self.path))
        if not words:  # a model of empty sentences is no model
            raise UserError("no words to estimate from (every line is blank)", str(self.path))

    def _piece_blocks(self) -> Iterator[np.ndarray]:
        flat = array("q")
        V = len(self.tokenizer)
        emitted = words = False
        for _, line in read_lines(self.path):
            flat.append(BOS)
            pieces = self.tokenizer.encode(line)
            words = words or bool(pieces)
            flat.extend(i if 0 <= i < V and i not in (PAD, BOS, EOS) else UNK for i in pieces)
            flat.append(EOS)
            if len(flat) >= self.block_tokens:
                yield np.frombuffer(flat, dtype=np.int64).copy()
                flat, emitted = array("q"), True
        if flat:
            yield np.frombuffer(flat, dtype=np.int64).copy()
        elif not emitted:
            raise UserError("empty corpus: no lines to estimate from", str(self.path))
        if not words:
            raise UserError("no words to estimate from (every line is blank)", str(self.path))


def _layout(ids: np.ndarray, is_break: np.ndarray) -> np.ndarray:
    """Word ids and line breaks of a block of whole lines -> flat ids: <s> before each line, a
    line break becomes </s> <s>, a final </s>."""
    if len(ids) and is_break[-1]:
        ids, is_break = ids[:-1], is_break[:-1]
    flat = np.empty(len(ids) + int(is_break.sum()) + 2, np.int64)
    dest = np.arange(len(ids)) + np.cumsum(is_break) + 1
    flat[0], flat[-1] = BOS, EOS
    flat[dest] = ids
    flat[dest[is_break]] = BOS
    flat[dest[is_break] - 1] = EOS
    return flat


def read_text_corpus(path: str | os.PathLike, tokenizer=None) -> tuple[list[str], np.ndarray]:
    """(vocabulary, flat token array) of a text file: whitespace words, or ``tokenizer.encode``."""
    reader = TextBlocks(path, tokenizer)
    blocks = list(reader.blocks())
    return reader.vocab, np.concatenate(blocks) if blocks else np.zeros(0, np.int64)


def flat_from_ragged(ragged, start: int, stop: int, limit: int = 0) -> np.ndarray:
    """Sentences ``start .. stop`` of a ``Ragged`` (a prepared corpus's ids: data/ragged.py) as one
    flat ``<s> w1 .. wm </s>`` int64 array, each cut to ``limit`` ids if > 0 (an LM's data.max_len),
    empty ones left out (an n-gram is estimated from what training reads, ids and no text)."""
    lengths = np.asarray(ragged.lengths[start:stop], np.int64)
    offsets = np.asarray(ragged.offsets[start:stop], np.int64)
    if limit > 0:
        lengths = np.minimum(lengths, limit)
    keep = lengths > 0
    lengths, offsets = lengths[keep], offsets[keep]
    n, total = len(lengths), int(lengths.sum())
    flat = np.empty(total + 2 * n, np.int64)
    first = np.zeros(n, np.int64)  # where each sentence's <s> goes
    np.cumsum(lengths[:-1] + 2, out=first[1:])
    flat[first] = BOS
    flat[first + lengths + 1] = EOS
    is_word = np.ones(len(flat), bool)
    is_word[first] = False
    is_word[first + lengths + 1] = False
    # every kept id, in order: a gather of each sentence's own range
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat[is_word] = ragged.ids[np.repeat(offsets, lengths) + within]
    return flat


class PreparedBlocks:
    """The training targets of a prepared corpus (data/prepared.py) as the streaming estimator's
    blocks of flat ``<s> .. </s>`` ids (ngram/stream.py), ``sentences`` sentences at a time; its
    vocabulary is the corpus's target tokenizer's pieces. No text is read."""

    def __init__(self, ragged, vocab: list[str], ranges: Sequence[tuple[int, int]] | None = None,
                 sentences: int = 1 << 18):
        self.ragged, self.sentences = ragged, sentences
        self.ranges = list(ranges) if ranges is not None else [(0, len(ragged))]
        words = list(vocab)
        words[: len(SPECIALS)] = SPECIALS
        self.vocab = words
        self.path = "prepared corpus"

    def blocks(self) -> Iterator[np.ndarray]:
        emitted = False
        for start, stop in self.ranges:
            for a in range(start, stop, self.sentences):
                block = flat_from_ragged(self.ragged, a, min(a + self.sentences, stop))
                if len(block):
                    emitted = True
                    yield block
        if not emitted:
            raise UserError("no words to estimate from (the corpus's targets are empty)")
