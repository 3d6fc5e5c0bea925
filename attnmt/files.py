"""Reading the files a user names: one check before opening, bounded reads, bounded archives.

Every door that reads a path the user gave (a config, a run's pointer and vocabulary files, a
corpus, an n-gram model) goes through here, so a wrong kind of file fails the same way everywhere:

    check_regular(path, what)          # a one-line UserError unless PATH is a regular file
    open_regular(path, what)           # ... and open it for reading, binary
    read_small_text(path, limit, what) # all of a small UTF-8 file (a config, a pointer)
    open_input(path, what)             # a binary stream, gzip/xz/bz2 decompressed (bounded)

A directory, FIFO, character or block device or socket is refused before it is opened ("PATH: is a
FIFO, not a regular file"): reading /dev/zero never ends and a FIFO with no writer blocks forever.
The file is then opened without blocking and checked again (``fstat``), so a FIFO put in its place
between the check and the open is refused too. "not found" is said only when nothing is there.

Archives are decompressed by ``open_input`` with two limits, so a decompression bomb (a small
gzip of endless blank lines) stops with an error instead of running for hours: at most
``ARCHIVE_RATIO`` (100) times the compressed size plus 1 MiB, and at most ``ARCHIVE_BYTES``
(64 GiB) in all. A real ARPA model compresses 3-8x; the environment variables
``ATTNMT_MAX_ARCHIVE_RATIO`` and ``ATTNMT_MAX_ARCHIVE_BYTES`` raise them. Every member must be
complete, and anything after the last one that is not another member is an error (a gzip member
followed by junk is a damaged file, not a good model).
"""

from __future__ import annotations

import bz2
import io
import lzma
import os
import stat
import zlib
from typing import BinaryIO

from attnmt.errors import UserError

SMALL_TEXT_BYTES = 1 << 20  # a config, a labels or pointer file: a few KB, never a megabyte
POINTER_BYTES = 64  # checkpoints/BEST, LAST: one line "step-NNNNNNNN"
VOCAB_BYTES = 256 << 20  # a word vocabulary: a million words of up to 256 bytes
ARCHIVE_RATIO = 100  # decompressed bytes per compressed byte (plus 1 MiB)
ARCHIVE_BYTES = 64 << 30
_CHUNK = 1 << 16
MAGIC = {"gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh"}

_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` is, if it is not a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _refuse(kind: str, path: str, what: str) -> UserError:
    if kind == "a directory":
        return UserError(f"is a directory, expected a {what}", path)
    return UserError(f"is {kind}, not a regular file (expected a {what})", path)


def check_regular(path: str | os.PathLike, what: str = "file") -> str:
    """``path`` as a string if it names a regular file (symbolic links followed), else a one-line
    UserError: not found (nothing there, or a link to nothing), a directory, FIFO, device or socket,
    no permission to look."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        dangling = os.path.islink(path)
        raise UserError(f"{what} not found" + (" (a symbolic link to nothing)" if dangling else ""),
                        path) from None
    except NotADirectoryError:
        raise UserError(f"{what} not found (a folder on the way is a file)", path) from None
    except PermissionError:
        raise UserError("permission denied", path) from None
    except OSError as err:  # a name too long, a loop of links
        raise UserError(f"cannot be read ({err.strerror or err})", path) from None
    kind = kind_of(mode)
    if kind:
        raise _refuse(kind, path, what)
    return path


def open_regular(path: str | os.PathLike, what: str = "file") -> BinaryIO:
    """``check_regular``, then ``open(path, "rb")``. The open does not block (O_NONBLOCK) and the
    opened file is checked again, so a FIFO swapped in after the check is refused, not waited on."""
    path = check_regular(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{what} not found", path) from None
    except PermissionError:
        raise UserError("permission denied", path) from None
    except OSError as err:
        raise UserError(f"cannot be read ({err.strerror or err})", path) from None
    kind = kind_of(os.fstat(fd).st_mode)
    if kind:
        os.close(fd)
        raise _refuse(kind, path, what)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_small_bytes(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """All bytes of a regular file of at most ``limit`` bytes (more is a one-line error)."""
    with open_regular(path, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"is over the {limit}-byte limit for a {what}", os.fspath(path))
    return data


def read_small_text(path: str | os.PathLike, limit: int = SMALL_TEXT_BYTES, what: str = "file") -> str:
    """A small UTF-8 text file (a config, a pointer, a label list), read in one piece of at most
    ``limit`` bytes; invalid UTF-8 or a NUL byte is a one-line error naming file and line."""
    data = read_small_bytes(path, limit, what)
    nul = data.find(b"\0")
    if nul >= 0:
        raise UserError(f"NUL byte at byte {nul} (a binary file, not a {what})", os.fspath(path),
                        data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"invalid UTF-8 at byte {err.start}", os.fspath(path),
                        data.count(b"\n", 0, err.start) + 1) from None


def _limit_from_env(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise UserError(f"{name} must be a whole number >= 1, got {value!r}")
    return number


def archive_limit(compressed_bytes: int) -> int:
    """How many bytes an archive of ``compressed_bytes`` may decompress to."""
    ratio = _limit_from_env("ATTNMT_MAX_ARCHIVE_RATIO", ARCHIVE_RATIO)
    total = _limit_from_env("ATTNMT_MAX_ARCHIVE_BYTES", ARCHIVE_BYTES)
    return min(ratio * compressed_bytes + (1 << 20), total)


class ArchiveError(UserError):
    """A damaged or over-large compressed file (a reader adds the line it got to, if it knows it)."""


def _decompressor(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    return lzma.LZMADecompressor() if kind == "xz" else bz2.BZ2Decompressor()


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a gzip/xz/bz2 file of one or more members, at most ``limit``."""

    def __init__(self, raw: BinaryIO, path: str, kind: str, limit: int):
        self.raw, self.path, self.kind, self.limit = raw, path, kind, limit
        self.dec = _decompressor(kind)
        self.pending = b""  # decompressed, not yet returned
        self.produced = 0
        self.consumed = 0  # compressed bytes read from raw
        self.done = False

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.raw.close()
        super().close()

    def readinto(self, buffer) -> int:
        while not self.pending and not self.done:
            self._fill()
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def _error(self, message: str) -> ArchiveError:
        return ArchiveError(message, self.path)

    def _read_raw(self) -> bytes:
        data = self.raw.read(_CHUNK)
        self.consumed += len(data)
        return data

    def _fill(self) -> None:
        dec = self.dec
        try:
            if dec.eof:  # a member ended: another member, the end of the file, or junk
                rest = dec.unused_data or self._read_raw()
                if not rest:
                    self.done = True
                    return
                magic = MAGIC[self.kind]
                while len(rest) < len(magic):
                    more = self._read_raw()
                    if not more:
                        break
                    rest += more
                if not rest.startswith(magic):
                    at = self.consumed - len(rest)
                    raise self._error(f"junk after the {self.kind} data at byte {at} (a damaged file)")
                self.dec = dec = _decompressor(self.kind)
                out = dec.decompress(rest, _CHUNK)
            elif self.kind == "gzip" and dec.unconsumed_tail:
                out = dec.decompress(dec.unconsumed_tail, _CHUNK)
            elif self.kind != "gzip" and not dec.needs_input:
                out = dec.decompress(b"", _CHUNK)
            else:
                data = self._read_raw()
                if not data:
                    raise self._error(f"truncated {self.kind} data (the file ends inside a member)")
                out = dec.decompress(data, _CHUNK)
        except (zlib.error, lzma.LZMAError, OSError, EOFError) as err:
            raise self._error(f"corrupt {self.kind} data ({err})") from None
        self.produced += len(out)
        if self.produced > self.limit:
            raise self._error(
                f"decompresses to over {self.limit} bytes (a decompression bomb?); if it is genuine, raise "
                "ATTNMT_MAX_ARCHIVE_RATIO (default 100 x its size) or ATTNMT_MAX_ARCHIVE_BYTES")
        self.pending = out


def compression_of(head: bytes) -> str | None:
    """gzip, xz or bz2 if ``head`` (a file's first bytes) starts with that format's magic."""
    return next((kind for kind, magic in MAGIC.items() if head.startswith(magic)), None)


def open_input(path: str | os.PathLike, what: str = "file") -> BinaryIO:
    """A regular file for reading, binary; gzip, xz and bz2 files (known by their first bytes)
    come decompressed, within ``archive_limit`` of their size."""
    f = open_regular(path, what)
    head = f.peek(8)[:8] if hasattr(f, "peek") else b""
    kind = compression_of(head)
    if kind is None:
        return f
    size = os.fstat(f.fileno()).st_size
    return io.BufferedReader(_Decompressed(f, os.fspath(path), kind, archive_limit(size)), _CHUNK)
