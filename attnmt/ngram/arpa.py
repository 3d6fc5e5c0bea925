"""ARPA back-off files, read and written compatibly with KenLM.

Conventions (as KenLM): log10 probabilities and backoffs; fields separated by a tab (words by a
space); every order but the highest has a backoff column; ``<s>`` is listed with log prob 0 (it is
never predicted); ``<unk>`` is always listed (a file without it gets ``<unk>`` at -100, KenLM's
default). Ids: 0 ``<pad>`` (never in the file), 1 ``<unk>``, 2 ``<s>``, 3 ``</s>``, then the other
unigrams in file order, so a file we wrote reloads with the same ids.

Numbers are written with 9 significant digits, which round-trips float32 exactly: our scores and
KenLM's on our file use bit-identical parameters.
"""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np

from attnmt.data.corpus import atomic_path
from attnmt.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from attnmt.errors import UserError
from attnmt.files import ArchiveError, open_input
from attnmt.ngram.estimate import OrderTable
from attnmt.ngram.lines import LineWriter
from attnmt.ngram.tables import DiskTables, MemoryTables, block_words

UNKNOWN_MISSING_LOGPROB = -100.0  # what KenLM gives <unk> when a file lacks it
_CHUNK = 200_000  # lines parsed at a time
_BLOCK = 1 << 16  # lines assembled at a time (their temporaries stay below 32 MB)


def ngram_words(tables: list[OrderTable], k: int, rows: np.ndarray) -> np.ndarray:
    """Word ids [len(rows), k] of the order-k entries ``rows``, following the prefix chain."""
    out = np.empty((len(rows), k), np.int64)
    idx = rows
    for j in range(k, 0, -1):
        out[:, j - 1] = tables[j - 1].word[idx]
        idx = tables[j - 1].prefix[idx]
    return out


def check_arpa_vocab(path: str | os.PathLike, vocab: list[str]) -> None:
    """Refuse vocabularies that cannot be written as ARPA words (before any work is done)."""
    if len(set(vocab[1:])) != len(vocab) - 1:
        raise UserError("the vocabulary has duplicate entries; it cannot be written as ARPA",
                        str(path))
    bad = next((w for w in vocab[1:] if not w or len(w.split()) != 1 or w != w.strip()), None)
    if bad is not None:
        raise UserError(f"vocabulary entry {bad!r} is empty or contains whitespace; it cannot be "
                        "written as ARPA (use the binary format)", str(path))


def write_arpa(path: str | os.PathLike, vocab: list[str],
               tables: list[OrderTable] | MemoryTables | DiskTables, block: int = _BLOCK) -> None:
    """Write an ARPA file (atomically: a temporary file renamed into place).

    ``tables``: the per-order tables, in memory or on disk (:mod:`attnmt.ngram.tables`); the
    lines are assembled by :class:`attnmt.ngram.lines.LineWriter`, ``block`` n-grams at a time.
    """
    check_arpa_vocab(path, vocab)
    source = MemoryTables(tables) if isinstance(tables, list) else tables
    path = Path(path)
    order = source.order
    unigrams = source.read(1, 0, source.size(1))
    uni_rows = np.nonzero(np.isfinite(unigrams.logp) & (np.arange(len(vocab)) != PAD))[0]
    counts = [len(uni_rows)] + [source.size(k) for k in range(2, order + 1)]
    writer = LineWriter(vocab, block)
    opener = gzip.open if path.suffix == ".gz" else open
    with atomic_path(path) as tmp, opener(tmp, "wb") as f:  # no half-written file on any error
        f.write(b"\\data\\\n")
        for k, n in enumerate(counts, start=1):
            f.write(f"ngram {k}={n}\n".encode())
        for k in range(1, order + 1):
            f.write(f"\n\\{k}-grams:\n".encode())
            for start in range(0, counts[k - 1], block):
                if k == 1:
                    rows = uni_rows[start : start + block]
                    t = OrderTable(unigrams.word[rows], unigrams.prefix[rows],
                                   unigrams.logp[rows], unigrams.logb[rows])
                else:
                    t = source.read(k, start, start + block)
                f.write(memoryview(writer.lines(block_words(source, k, t), t.logp,
                                                t.logb if k < order else None)))
        f.write(b"\n\\end\\\n")


_MAX_LINE = 1 << 20  # an ARPA line is an n-gram and two numbers; a longer one is binary junk
_BLANK = b" \t\r\n"  # what a blank line holds (str.strip's ASCII whitespace, as ARPA uses)


class _Lines:
    """Numbered, UTF-8-checked lines of a (possibly gzipped) file."""

    def __init__(self, path: Path):
        self.path = path
        # gzip/xz/bz2 decompressed within attnmt.files.archive_limit (a bomb of blank lines stops)
        self.f = open_input(path, "ARPA file")
        self.lineno = 0
        self.pending: str | None = None

    def error(self, message: str, line: int | None = None) -> UserError:
        return UserError(message, str(self.path), self.lineno if line is None else line)

    def next(self) -> str | None:
        if self.pending is not None:
            line, self.pending = self.pending, None
            return line
        try:
            raw = self.f.readline(_MAX_LINE)
        except ArchiveError as err:  # a truncated, corrupt or over-large .gz, .xz, .bz2
            message = str(err).removeprefix(f"{self.path}: ")
            raise self.error(f"{message}, after this line") from None
        if not raw:
            return None
        self.lineno += 1
        if len(raw) >= _MAX_LINE:
            raise self.error(f"line over {_MAX_LINE} bytes: not an ARPA file")
        try:
            return raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as err:
            raise self.error(f"invalid UTF-8 ({err.reason})") from None

    def push_back(self, line: str) -> None:
        self.pending = line

    def skip_blank(self) -> None:
        """Pass every blank line ahead by whole buffers, counting them: a file of blank lines
        (hundreds of MB of them compress to a small .gz) costs a bytes scan per buffer, not a
        Python line each (~2 MB/s). Stops at the start of the first line with text."""
        if self.pending is not None:
            return
        try:
            while True:
                ahead = self.f.peek(1)
                if not ahead:
                    return
                text = ahead.lstrip(_BLANK)
                # only up to the last newline inside the blank run: what follows it is the next
                # line's start (its leading spaces included)
                blank = ahead[: len(ahead) - len(text)]
                end = blank.rfind(b"\n") + 1
                if not end:
                    return
                self.lineno += blank.count(b"\n", 0, end)
                self.f.read(end)
                if end < len(ahead):
                    return
        except ArchiveError as err:
            message = str(err).removeprefix(f"{self.path}: ")
            raise self.error(f"{message}, after this line") from None

    def next_nonblank(self) -> str | None:
        while True:
            self.skip_blank()
            line = self.next()
            if line is None or line.strip():
                return line


def _number(text: str, lines: _Lines, what: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise lines.error(f"bad {what} {text!r}") from None
    if not math.isfinite(x):
        raise lines.error(f"bad {what} {text!r} (must be finite)")
    return x


def _read_counts(lines: _Lines) -> list[int]:
    while True:
        line = lines.next_nonblank()
        if line is None:
            raise lines.error("not an ARPA file: no \\data\\ section")
        if line.strip() == "\\data\\":
            break
    counts: list[int] = []
    while True:
        line = lines.next()
        if line is None or not line.strip():
            break
        head, _, value = line.strip().partition("=")
        parts = head.split()
        if len(parts) != 2 or parts[0] != "ngram" or not value:
            raise lines.error(f"bad count line {line!r} (expected 'ngram K=COUNT')")
        try:
            k, n = int(parts[1]), int(value)
        except ValueError:
            raise lines.error(f"bad count line {line!r}") from None
        if k != len(counts) + 1 or n < 0:
            raise lines.error(f"count lines must be 'ngram 1=..', 'ngram 2=..', ... got {line!r}")
        counts.append(n)
    if not counts:
        raise lines.error("\\data\\ section lists no n-gram counts")
    return counts


def read_arpa(path: str | os.PathLike) -> tuple[list[str], list[OrderTable]]:
    """Read an ARPA file into (vocab, per-order tables); malformed input raises UserError."""
    path = Path(path)
    lines = _Lines(path)
    try:
        counts = _read_counts(lines)
        order = len(counts)
        vocab: list[str] = list(SPECIALS)
        index = {w: i for i, w in enumerate(SPECIALS) if i != PAD}
        tables: list[OrderTable] = []
        for k in range(1, order + 1):
            header = lines.next_nonblank()
            if header is None or header.strip() != f"\\{k}-grams:":
                got = "end of file" if header is None else repr(header)
                raise lines.error(f"expected the \\{k}-grams: section, got {got}")
            tables.append(_read_section(lines, k, order, counts[k - 1], vocab, index, tables))
        end = lines.next_nonblank()
        if end is None or end.strip() != "\\end\\":
            got = "end of file" if end is None else repr(end)
            raise lines.error(f"expected \\end\\, got {got}")
        # the rest is read too: junk after a gzip member (or text after \end\) is a damaged file
        rest = lines.next_nonblank()
        if rest is not None:
            raise lines.error(f"text after \\end\\: {rest[:40]!r}")
    finally:
        lines.f.close()
    return vocab, tables


def _read_section(lines, k, order, expected, vocab, index, tables) -> OrderTable:
    """One \\k-grams: section, parsed _CHUNK lines at a time into arrays (entry i is on line
    start + 1 + i: a section has no blank lines), so a section costs its arrays, not a Python
    object per line."""
    start_line = lines.lineno
    n = 0
    blocks = []  # k == 1: (ids, logp, logb); k >= 2: (keys, logp, logb)
    done = False
    prev_keys = None  # keys of orders 2..k-1, to find each n-gram's context
    while not done:
        probs, backs, grams = [], [], []
        while len(probs) < _CHUNK:
            line = lines.next()
            if line is None or not line.strip() or line.lstrip().startswith("\\"):
                if line is not None and line.strip():
                    lines.push_back(line)
                done = True
                break
            if n + len(probs) == expected:
                raise lines.error(f"more {k}-grams than the {expected} declared in \\data\\")
            parts = line.split()
            if len(parts) not in (k + 1, k + 2) or (len(parts) == k + 2 and k == order):
                raise lines.error(f"expected log-prob, {k} word(s)"
                                  f"{', optional backoff' if k < order else ''}; got {line!r}")
            p = _number(parts[0], lines, "log probability")
            if p > 0:
                raise lines.error(f"positive log probability {parts[0]}")
            probs.append(p)
            backs.append(_number(parts[k + 1], lines, "backoff") if len(parts) == k + 2 else 0.0)
            ws = parts[1 : k + 1]
            if k == 1:
                w = ws[0]
                if w in index and w not in SPECIALS:
                    raise lines.error(f"duplicate unigram {w!r}")
                if w not in index:
                    index[w] = len(vocab)
                    vocab.append(w)
                grams.append(index[w])
            else:
                try:
                    grams.extend([index[w] for w in ws])
                except KeyError as err:
                    raise lines.error(f"word {err.args[0]!r} is not among the 1-grams") from None
        if not probs:
            continue
        logp = np.asarray(probs, np.float64).astype(np.float32)
        logb = np.asarray(backs, np.float64).astype(np.float32)
        if k == 1:
            blocks.append((np.asarray(grams, np.int64), logp, logb))
        else:
            V = np.int64(len(vocab))
            if prev_keys is None:
                prev_keys = [None, None] + [tables[j - 1].prefix * V + tables[j - 1].word
                                            for j in range(2, k)]
            ids = np.asarray(grams, np.int64).reshape(-1, k)
            idx = ids[:, 0]
            for j in range(2, k):
                idx = _find(prev_keys[j], idx, ids[:, j - 1], V)
                bad = np.nonzero(idx < 0)[0]
                if len(bad):
                    i = bad[0]
                    ctx = " ".join(vocab[w] for w in ids[i, : k - 1])
                    raise lines.error(f"n-gram's context {ctx!r} is not among the {k - 1}-grams",
                                      start_line + 1 + n + int(i))
            blocks.append((idx * V + ids[:, -1], logp, logb))
        n += len(probs)
    if n != expected:
        raise lines.error(f"\\{k}-grams: section (from line {start_line}) has {n} "
                          f"entries but \\data\\ declares {expected}")
    logp = np.concatenate([b[1] for b in blocks]) if blocks else np.zeros(0, np.float32)
    logb = np.concatenate([b[2] for b in blocks]) if blocks else np.zeros(0, np.float32)
    if k == 1:
        ids = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0, np.int64)
        if len(np.unique(ids)) != len(ids):
            dup = np.nonzero(np.bincount(ids)[ids] > 1)[0][-1]
            raise lines.error("duplicate unigram", start_line + 1 + int(dup))
        V = len(vocab)
        full_p = np.full(V, -np.inf, np.float32)
        full_b = np.zeros(V, np.float32)
        full_p[ids] = logp
        full_b[ids] = logb
        for special, name in ((BOS, "<s>"), (EOS, "</s>")):
            if special not in set(ids.tolist()):
                raise lines.error(f"the 1-grams lack {name}")
        if UNK not in set(ids.tolist()):
            full_p[UNK] = UNKNOWN_MISSING_LOGPROB
        return OrderTable(np.arange(V, dtype=np.int32), np.zeros(V, np.int64), full_p, full_b)
    V = np.int64(len(vocab))
    keys = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0, np.int64)
    del blocks
    if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):  # lmplz's order, not ours
        perm = np.argsort(keys, kind="stable")
        keys, logp, logb = keys[perm], logp[perm], logb[perm]
        dup = np.nonzero(keys[1:] == keys[:-1])[0]
        if len(dup):
            raise lines.error(f"duplicate {k}-gram", start_line + 1 + int(perm[dup[0] + 1]))
    return OrderTable((keys % V).astype(np.int32), keys // V, logp, logb)


def _find(keys: np.ndarray, prefix: np.ndarray, word: np.ndarray, V) -> np.ndarray:
    """Numpy twin of QueryIndex.find for a non-dense order (keys = prefix * V + word, sorted):
    entry index of (prefix, word) or -1."""
    q = prefix * V + word
    if len(keys) == 0:
        return np.full(len(q), -1, np.int64)
    i = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return np.where((keys[i] == q) & (prefix >= 0), i, -1)
