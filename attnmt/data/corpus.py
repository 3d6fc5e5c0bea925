"""Reading parallel and monolingual text with validation.

A parallel corpus is either two aligned files ``PREFIX.SRC`` / ``PREFIX.TGT`` or one TSV file whose
last two columns are source and target (``key<TAB>src<TAB>tgt`` also works). Problems the user can
fix are reported as one-line errors naming the file and line: different line counts (both files
and counts), invalid UTF-8 (file:line), lines over ``MAX_LINE_BYTES`` (file:line). Pairs with an
empty side are skipped and counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from attnmt.errors import UserError

MAX_LINE_BYTES = 1_000_000  # a "line" longer than this is a wrong or binary file, not a sentence


@dataclass
class ReadStats:
    lines: int = 0
    empty_skipped: int = 0
    too_long_skipped: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.lines} lines, {self.empty_skipped} skipped as empty, "
            f"{self.too_long_skipped} filtered as too long"
        )


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file, without line endings; errors name file:line."""
    path = str(path)
    if not os.path.exists(path):
        raise UserError("file not found", path)
    out = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(f"line is {len(raw)} bytes, over the {MAX_LINE_BYTES} limit", path, number)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"invalid UTF-8 at byte {err.start}", path, number) from None
            out.append(text.rstrip("\r\n"))
    return out


def parallel_paths(prefix: str, src: str, tgt: str) -> tuple[str, str] | str:
    """Resolve a corpus spec: a .tsv file, or a prefix with .SRC/.TGT files."""
    if prefix.endswith(".tsv") or (os.path.isfile(prefix) and not os.path.exists(f"{prefix}.{src}")):
        return prefix
    return f"{prefix}.{src}", f"{prefix}.{tgt}"


def read_parallel(prefix: str, src: str, tgt: str) -> tuple[list[str], list[str], ReadStats]:
    """Read a parallel corpus; returns aligned source and target lines with empty pairs removed."""
    paths = parallel_paths(prefix, src, tgt)
    stats = ReadStats()
    if isinstance(paths, str):
        src_lines, tgt_lines = [], []
        for number, line in enumerate(read_lines(paths), start=1):
            cols = line.split("\t")
            if len(cols) < 2:
                if not line.strip():
                    src_lines.append("")
                    tgt_lines.append("")
                    continue
                raise UserError("expected at least two tab-separated columns", paths, number)
            src_lines.append(cols[-2])
            tgt_lines.append(cols[-1])
    else:
        src_path, tgt_path = paths
        src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
        if len(src_lines) != len(tgt_lines):
            raise UserError(
                f"line counts differ: {src_path} has {len(src_lines)} lines, "
                f"{tgt_path} has {len(tgt_lines)}"
            )
    keep_src, keep_tgt = [], []
    for s, t in zip(src_lines, tgt_lines):
        stats.lines += 1
        if not s.strip() or not t.strip():
            stats.empty_skipped += 1
            continue
        keep_src.append(s.strip())
        keep_tgt.append(t.strip())
    if not keep_src:
        where = paths if isinstance(paths, str) else paths[0]
        raise UserError("corpus has no non-empty sentence pairs", where)
    return keep_src, keep_tgt, stats


def write_lines(path: str | os.PathLike, lines: list[str]) -> None:
    """Write lines atomically (temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)
