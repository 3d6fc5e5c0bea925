"""The raw text a preparation reads: corpus specs, line-aligned chunks, and the tokenizer sample.

A corpus is ``PREFIX`` (``PREFIX.SRC`` and ``PREFIX.TGT``), a ``.tsv`` file (its last two columns;
data/corpus.py), or for a language model one text file; ``PREFIX:WEIGHT`` gives it a weight
(OpenNMT-py's ``weight``: ``in-domain:3`` is seen three times an epoch). A first pass over each
file (numpy over 16 MB blocks, no per-line Python) counts its lines, records the byte offset of
every ``CHUNK_LINES``-th line and its SHA-256, so worker processes can each read a chunk of whole
lines of both files at once, and the two files are found to disagree before any work is done.

The tokenizers learn from a bounded sample: every line of a corpus of at most ``limit`` lines
(the lines of its non-empty pairs, in order: what earlier versions trained on), else ``limit``
lines drawn at random byte offsets (seek, skip to the next line start, read a line), so the time
it takes does not grow with the corpus. Sampling by offset favours lines after long lines a
little; a tokenizer does not notice.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from dataclasses import dataclass, field

import numpy as np

from attnmt.data.corpus import MAX_LINE_BYTES, parallel_paths
from attnmt.errors import UserError
from attnmt.files import check_regular, open_regular

CHUNK_LINES = 50_000  # lines a worker encodes at once
BLOCK = 16 << 20
_WEIGHT = re.compile(r"^(.*):([0-9]*\.?[0-9]+)$")


@dataclass
class CorpusSource:
    """One corpus: its name (as given), files and weight."""

    name: str
    paths: tuple[str, ...]  # (src, tgt) | (tsv,) | (text,) for an LM
    weight: float = 1.0
    tsv: bool = False


def parse_sources(text: str, task: str, src: str, tgt: str, domains: list[str] | None = None,
                  key: str = "--train") -> list[CorpusSource]:
    """``PREFIX[:WEIGHT] ...`` (space-separated) as corpora. An LM's ``{domain}`` in a path names
    one file per domain (``ngram.domains``), each its own corpus, in the domains' order."""
    out: list[CorpusSource] = []
    for item in text.split():
        m = _WEIGHT.match(item)
        path, weight = (m.group(1), float(m.group(2))) if m else (item, 1.0)
        if weight <= 0:
            raise UserError(f"{key}: weight of {path} must be > 0, got {weight}")
        if task == "lm":
            names = domains or [None]
            if domains and "{domain}" not in path:
                raise UserError(f"{key}: {path} has no {{domain}} for ngram.domains")
            for name in names:
                file = path.replace("{domain}", name) if name else path
                out.append(CorpusSource(name or path, (check_regular(file, "text file"),), weight))
            continue
        paths = parallel_paths(path, src, tgt)
        if isinstance(paths, str):
            out.append(CorpusSource(path, (check_regular(paths, "corpus file"),), weight, tsv=True))
        else:
            out.append(CorpusSource(path, tuple(check_regular(p, "corpus file") for p in paths), weight))
    if not out:
        raise UserError(f"{key}: no corpus given")
    return out


@dataclass
class FileIndex:
    """Line count, SHA-256 and every CHUNK_LINES-th line's byte offset of one file."""

    path: str
    lines: int
    size: int
    mtime_ns: int
    sha256: str
    starts: np.ndarray = field(repr=False)  # byte offsets of lines 0, every, 2·every ..
    every: int = CHUNK_LINES

    def record(self) -> dict:
        return {"path": self.path, "lines": self.lines, "bytes": self.size, "sha256": self.sha256}


def index_file(path: str, every: int | None = None) -> FileIndex:
    """One pass over ``path`` (module docstring) that also checks it as data/corpus.py does (NUL
    bytes, invalid UTF-8, lines over MAX_LINE_BYTES: one error naming file:line), so a bad file
    stops the preparation before any work."""
    every = every or CHUNK_LINES
    digest = hashlib.sha256()
    starts: list[np.ndarray] = [np.zeros(1, np.int64)]
    newlines, pos, rest, line_start = 0, 0, b"", 0
    with open_regular(path, "corpus file") as f:
        st = os.fstat(f.fileno())
        while True:
            block = f.read(BLOCK)
            digest.update(block)
            at = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
            # the lines complete so far: checked whole (a character may straddle two blocks)
            data = rest + block[: at[-1] + 1] if len(at) else (rest + block if not block else b"")
            if data:
                _check(data, path, newlines - rest.count(b"\n") + 1)
            rest = block[at[-1] + 1 :] if len(at) else rest + block
            ends = pos + at.astype(np.int64)
            longest = np.diff(ends, prepend=line_start) if len(at) else np.zeros(0, np.int64)
            if len(longest) and longest.max() > MAX_LINE_BYTES + 1:
                k = int(np.argmax(longest > MAX_LINE_BYTES + 1))
                raise UserError(f"line is over the {MAX_LINE_BYTES}-byte limit", path, newlines + k + 1)
            if len(rest) > MAX_LINE_BYTES:
                raise UserError(f"line is over the {MAX_LINE_BYTES}-byte limit", path, newlines + len(at) + 1)
            if len(at):
                line_start = int(ends[-1]) + 1
            # line g + 1 starts after newline g (counted from 0); keep lines that are multiples of every
            first = (-newlines - 1) % every
            starts.append(ends[first::every] + 1)
            newlines += len(at)
            pos += len(block)
            if not block:
                break
    lines = newlines + (1 if pos > line_start else 0)
    offsets = np.concatenate(starts)
    offsets = offsets[offsets < pos] if pos else offsets[:0]
    return FileIndex(path, lines, pos, st.st_mtime_ns, digest.hexdigest(), offsets, every)


def _check(data: bytes, path: str, first_line: int) -> None:
    nul = data.find(b"\0")
    if nul >= 0:
        start = data.rfind(b"\n", 0, nul) + 1
        raise UserError(f"NUL byte at byte {nul - start} (a binary file, or UTF-16?)", path,
                        first_line + data.count(b"\n", 0, nul))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        start = data.rfind(b"\n", 0, err.start) + 1
        raise UserError(f"invalid UTF-8 at byte {err.start - start}", path,
                        first_line + data.count(b"\n", 0, err.start)) from None


def decode_lines(data: bytes, path: str, first_line: int, bom: bool) -> list[str]:
    """The lines of a block of whole lines, checked as data/corpus.py checks them (NUL bytes,
    invalid UTF-8, over-long lines: one error naming file:line), without their line endings."""
    if bom and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    nul = data.find(b"\0")
    if nul >= 0:
        line = first_line + data.count(b"\n", 0, nul)
        start = data.rfind(b"\n", 0, nul) + 1
        raise UserError(f"NUL byte at byte {nul - start} (a binary file, or UTF-16?)", path, line)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = first_line + data.count(b"\n", 0, err.start)
        start = data.rfind(b"\n", 0, err.start) + 1
        raise UserError(f"invalid UTF-8 at byte {err.start - start}", path, line) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(data) > MAX_LINE_BYTES:
        for k, line in enumerate(lines):
            if len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8")) > MAX_LINE_BYTES:
                raise UserError(f"line is over the {MAX_LINE_BYTES}-byte limit", path, first_line + k)
    return [line.rstrip("\r") for line in lines]


def read_range(path: str, start: int, stop: int) -> bytes:
    with open_regular(path, "corpus file") as f:
        f.seek(start)
        return f.read(stop - start)


def chunk_ranges(index: FileIndex) -> list[tuple[int, int, int]]:
    """(first line number, start byte, stop byte) of each chunk of ``index``'s file."""
    bounds = list(index.starts.tolist()) + [index.size]
    return [(1 + k * index.every, a, b) for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])) if b > a]


def split_pairs(lines: list[str], path: str, first_line: int) -> tuple[list[str], list[str], tuple | None]:
    """The last two tab-separated columns of TSV lines (a blank line is an empty pair); every
    non-blank line has as many columns as the first: (src, tgt, (line, columns) of the first)."""
    src, tgt, first = [], [], None
    for k, line in enumerate(lines):
        cols = line.split("\t")
        if len(cols) < 2:
            if not line.strip():
                src.append("")
                tgt.append("")
                continue
            raise UserError("expected at least two tab-separated columns", path, first_line + k)
        if first is None:
            first = (first_line + k, len(cols))
        elif len(cols) != first[1]:
            raise UserError(f"has {len(cols)} tab-separated columns, line {first[0]} has "
                            f"{first[1]} (a tab inside a sentence?)", path, first_line + k)
        src.append(cols[-2])
        tgt.append(cols[-1])
    return src, tgt, first


def read_pairs(source: CorpusSource, task: str) -> tuple[list[str], list[str] | None]:
    """All lines of a (small) corpus, unstripped: (source or text lines, target lines or None)."""
    def whole(path: str) -> list[str]:
        return decode_lines(read_range(path, 0, os.path.getsize(path)), path, 1, bom=True)

    if task == "lm":
        return whole(source.paths[0]), None
    if source.tsv:
        src, tgt, _ = split_pairs(whole(source.paths[0]), source.paths[0], 1)
        return src, tgt
    return whole(source.paths[0]), whole(source.paths[1])


def sample_at_offsets(path: str, count: int, rng: np.random.Generator) -> list[str]:
    """``count`` lines of ``path`` at random byte offsets (module docstring), in file order."""
    size = os.path.getsize(path)
    offsets = np.sort(rng.integers(0, max(size, 1), size=count))
    out: list[str] = []
    with open_regular(path, "corpus file") as f:
        for at in offsets.tolist():
            f.seek(at)
            if at:
                f.readline(MAX_LINE_BYTES + 1)  # the rest of the line the offset fell in
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:  # past the last line: take the first
                f.seek(0)
                raw = f.readline(MAX_LINE_BYTES + 1)
            out.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
    return out
