"""N-best lists: the format ``attnmt translate --nbest K`` writes and ``attnmt rerank`` reads.

One hypothesis a line, best first within a source line, Moses style:

    LINE ||| TEXT ||| SCORE

LINE is the 1-based number of the source line, as every line number attnmt prints (error
messages, ``score --per-sentence``'s ``line``); a blank source line has no entries. TEXT is the
hypothesis, SCORE the search's score (log-probability / length^α, ``--length-penalty``). The
entries of one source line are consecutive, the numbers do not decrease, and the first entry of a
line is the translation ``attnmt translate`` prints without ``--nbest`` (the others follow by
score). A 0-based list (Moses's, or one attnmt wrote before it counted from 1) is refused by its index 0.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from attnmt.data.corpus import read_lines
from attnmt.errors import UserError

SEPARATOR = " ||| "


@dataclass(frozen=True)
class Entry:
    text: str
    score: float
    where: int  # line number in the n-best file (for messages)


def format_entry(line: int, text: str, score: float) -> str:
    """One n-best line, as ``attnmt translate --nbest`` writes it."""
    return f"{line}{SEPARATOR}{text}{SEPARATOR}{score:.4f}"


def read_nbest(path: str | os.PathLike, lines: int | None = None) -> list[list[Entry]]:
    """The hypotheses of each source line, best first: ``lines`` lists (None: up to the last
    index named). Malformed lines, decreasing indices and an index ≥ ``lines`` are one-line
    errors naming the file and line."""
    groups: list[list[Entry]] = []
    last = -1
    for number, raw in enumerate(read_lines(path), 1):
        if not raw.strip():
            raise UserError("empty line (expected 'LINE ||| TEXT ||| SCORE')", str(path), number)
        fields = raw.split("|||")
        if len(fields) != 3:
            raise UserError(f"expected 3 fields 'LINE ||| TEXT ||| SCORE', got {len(fields)}", str(path), number)
        index, text, score = fields[0].strip(), fields[1].strip(), fields[2].strip()
        if not index.isdigit() or int(index) == 0:
            hint = " (LINE is 1-based; a 0-based list needs 1 added to each index)" if index.isdigit() else ""
            raise UserError(f"the line number must be a number >= 1, got {index!r}{hint}", str(path), number)
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UserError(f"the score must be a finite number, got {score!r}", str(path), number)
        i = int(index) - 1
        if i < last:
            raise UserError(f"line number {i + 1} after {last + 1}: the entries of a source line must be "
                            "consecutive, in order", str(path), number)
        if lines is not None and i >= lines:
            raise UserError(f"line number {i + 1}, but there are only {lines} source lines", str(path), number)
        while len(groups) <= i:
            groups.append([])
        groups[i].append(Entry(text, value, number))
        last = i
    if lines is not None:
        groups += [[] for _ in range(lines - len(groups))]
    if not any(groups):
        raise UserError("no hypotheses in the n-best list", str(path))
    return groups
