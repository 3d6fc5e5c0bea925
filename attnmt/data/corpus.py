"""Reading parallel and monolingual text with validation.

A parallel corpus is either two aligned files ``PREFIX.SRC`` / ``PREFIX.TGT`` or one TSV file whose
last two columns are source and target (``key<TAB>src<TAB>tgt`` also works; every line of a TSV
has the same number of columns). Problems the user can fix are reported as one-line errors naming
the file and line: different line counts (both files and counts), a TSV line with another number
of columns than the first, invalid UTF-8 or NUL bytes (file:line), lines over ``MAX_LINE_BYTES`` (file:line), a
directory where a file belongs. A UTF-8 byte-order mark at the start of a file is dropped (it is no
part of the first word). Pairs with an empty side are skipped and counted.

Outputs (``write_lines``, ``atomic_output``) go to a temporary name next to the destination and are
renamed into place only when complete; on any error the temporary file is removed, so a failed
command leaves no file behind. Outputs that belong together (a translation and its alignments)
are written inside ``output_group``: all of them are renamed only once every one is complete.
``check_output`` refuses a directory, a missing folder and an output that is one of the command's
inputs, before any work is done.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from attnmt.errors import UserError
from attnmt.files import check_regular, kind_of, open_regular

_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}  # a write that failed
MAX_LINE_BYTES = 1_000_000  # a "line" longer than this is a wrong or binary file, not a sentence
# (temporary, destination) of the complete outputs of the open output_group, renamed when it ends
_GROUP: ContextVar[list[tuple[Path, Path]] | None] = ContextVar("_GROUP", default=None)


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


def check_input(path: str | os.PathLike, what: str = "file") -> str:
    """``path`` as a string if it is an existing regular file, else a one-line error (a directory,
    FIFO or device is refused before it is opened: attnmt.files.check_regular)."""
    return check_regular(path, what)


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file, without line endings; errors name file:line."""
    with open_regular(path) as f:
        return read_stream(f, os.fspath(path))


def iter_stream(stream: BinaryIO, name: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a binary stream of UTF-8 lines; memory stays bounded by
    ``MAX_LINE_BYTES`` even for a file without newlines. ``name`` is used in error messages."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise UserError(f"line is over the {MAX_LINE_BYTES}-byte limit", name, number)
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        nul = raw.find(b"\0")
        if nul >= 0:
            raise UserError(f"NUL byte at byte {nul} (a binary file, or UTF-16?)", name, number)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"invalid UTF-8 at byte {err.start}", name, number) from None
        yield number, text.rstrip("\r\n")


def read_stream(stream: BinaryIO, name: str) -> list[str]:
    """All lines of a binary stream (e.g. ``sys.stdin.buffer``), checked like ``read_lines``."""
    return [text for _, text in iter_stream(stream, name)]


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
        first: tuple[int, int] | None = None  # (line, columns) of the first non-blank line
        for number, line in enumerate(read_lines(paths), start=1):
            cols = line.split("\t")
            if len(cols) < 2:
                if not line.strip():
                    src_lines.append("")
                    tgt_lines.append("")
                    continue
                raise UserError("expected at least two tab-separated columns", paths, number)
            if first is None:
                first = (number, len(cols))
            elif len(cols) != first[1]:  # the last two columns would be other fields on this line
                raise UserError(f"has {len(cols)} tab-separated columns, line {first[0]} has "
                                f"{first[1]} (a tab inside a sentence?)", paths, number)
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


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_output(
    path: str | os.PathLike, inputs: list[str | os.PathLike | None] | tuple = (), flag: str = ""
) -> Path:
    """A file the command may write: not a directory, in an existing folder, none of ``inputs``.
    Call it before the work starts, so a typo costs nothing."""
    path = Path(path)
    what = f"{flag} " if flag else ""
    if path.is_dir():
        raise UserError(f"{what}is a directory; give a file name", str(path))
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise UserError(f"{what}cannot be written: folder {parent} {why}", str(path))
    for other in inputs:
        if other is not None and _same_file(path, other):
            raise UserError(f"{what}would overwrite the input {other}", str(path))
    _check_replaceable(path, what)
    return path


def _check_replaceable(path: Path, what: str) -> None:
    """An output is written under a temporary name and renamed into place, which replaces
    whatever node is there: a symbolic link, a FIFO or a device (as root, /dev/null itself) would
    become a regular file. So only a regular file (or nothing) is accepted; /dev/stdout and
    /dev/null are refused too (leave the option out to write to stdout; redirect that)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise UserError(f"{what}cannot be written ({err.strerror or err})", str(path)) from None
    if stat.S_ISLNK(mode):
        raise UserError(f"{what}is a symbolic link; writing would replace the link with a file: give "
                        "the path of a regular file", str(path))
    if not stat.S_ISREG(mode):
        kind = kind_of(mode) or "not a regular file"
        raise UserError(f"{what}is {kind}, not a regular file; an output would replace it (to write to "
                        "stdout, leave the option out where the command allows it)", str(path))


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``path`` to write to; renamed to ``path`` when the block ends
    normally, deleted when it raises (nothing half-written is left)."""
    path = check_output(path)
    tmp = path.with_name(f".{path.name}.tmp")
    group = _GROUP.get()
    try:
        yield tmp
        if group is None:
            os.replace(tmp, path)
        else:  # complete; output_group renames it together with the others
            group.append((tmp, path))
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        # no permission, a read-only or full disk: named by the output, not its temporary name
        # (or, for a write error without a name, a traceback)
        if isinstance(err, OSError) and (
                (err.filename is not None and os.fspath(err.filename) == os.fspath(tmp))
                or (err.filename is None and err.errno in _WRITE_ERRNOS)):
            raise UserError(f"cannot be written ({err.strerror or err})", str(path)) from None
        raise


@contextmanager
def output_group() -> Iterator[None]:
    """Outputs written inside the block (through ``atomic_path``) belong together: each stays under
    its temporary name when complete, and all are renamed into place when the block ends normally.
    If it raises, every temporary file is removed, so a failure after the first output leaves
    none of them new; a destination that cannot be replaced (a folder by now, a folder without
    write permission) is found before the first rename. Inside another group it joins that one."""
    if _GROUP.get() is not None:
        yield
        return
    done: list[tuple[Path, Path]] = []
    token = _GROUP.set(done)
    try:
        yield
    except BaseException:
        _discard(tmp for tmp, _ in done)
        raise
    finally:
        _GROUP.reset(token)
    # What makes a rename fail predictably (a destination that became a folder, a folder no
    # longer writable) is checked for all of them before the first, so it replaces nothing. A
    # backup of each replaced file to restore instead was left out: the restore can fail for the
    # same reasons, and hard links are not on every file system. What remains (a race, a file
    # system turned read-only) is reported with the files already in place.
    for _, path in done:
        why = ("Is a directory" if path.is_dir()
               else None if os.access(path.parent, os.W_OK | os.X_OK) else "Permission denied")
        if why:
            _discard(tmp for tmp, _ in done)
            raise UserError(f"cannot be written ({why})", str(path))
    for i, (tmp, path) in enumerate(done):
        try:
            os.replace(tmp, path)
        except OSError as err:  # the earlier ones are in place: say so rather than hide it
            _discard(left for left, _ in done[i:])
            moved = ", ".join(str(p) for _, p in done[:i])
            raise UserError(f"cannot be written ({err.strerror or err})"
                            + (f"; {moved} already written" if moved else ""), str(path)) from None


def _discard(paths: Iterable[Path]) -> None:
    for path in paths:
        with suppress(OSError):  # a folder made read-only meanwhile: the error that matters is raised
            path.unlink(missing_ok=True)


@contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator:
    """``open`` for writing through ``atomic_path``."""
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def write_lines(path: str | os.PathLike, lines: list[str]) -> None:
    """Write lines atomically (temporary file, then rename)."""
    with atomic_output(path) as f:
        for line in lines:
            f.write(line + "\n")
