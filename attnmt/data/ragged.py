"""Token-id sentences as flat arrays: the one layout training reads, in memory or memory-mapped.

A ``Ragged`` holds n sentences as three arrays — ``ids`` (every sentence's ids, concatenated;
uint16 or uint32 on disk), ``offsets`` (int64, n + 1: sentence i is ``ids[offsets[i]:offsets[i+1]]``)
and ``lengths`` (n; what batching reads) — so a corpus of millions of sentences is three numpy
arrays, not millions of Python lists. On disk they are ``PREFIX.ids.npy``, ``PREFIX.off.npy`` and
``PREFIX.len.npy`` (plain ``.npy``: ``np.load(path, mmap_mode="r")`` reads them), opened
read-only and memory-mapped, so every process of a machine (torchrun's ranks, row workers) reads
the same page-cache pages.

A mapped file's pages count towards a process's resident set once touched. ``release`` drops
them from this process's page tables (the page cache keeps them; the next read faults them back
in without I/O), so a long epoch over a large corpus does not grow the trainer's memory.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SUFFIXES = ("ids", "off", "len")


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocabulary."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class Ragged:
    """n token-id sequences in flat arrays (see the module docstring)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, lengths: np.ndarray):
        self.ids, self.offsets, self.lengths = ids, offsets, lengths

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]]) -> "Ragged":
        lengths = np.fromiter((len(s) for s in seqs), np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((i for s in seqs for i in s), np.int64, count=int(offsets[-1]))
        return cls(ids, offsets, lengths)

    @classmethod
    def open(cls, prefix: str | os.PathLike) -> "Ragged":
        """The arrays ``PREFIX.{ids,off,len}.npy``, memory-mapped read-only."""
        arrays = [np.load(f"{prefix}.{s}.npy", mmap_mode="r", allow_pickle=False) for s in SUFFIXES]
        return cls(*arrays)

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        return np.asarray(self.ids[self.offsets[i] : self.offsets[i + 1]])

    def to_lists(self, reverse: bool = False) -> list[list[int]]:
        """Every sequence as a Python list (for small sets only: dev data, tests)."""
        rows = [self.row(i).tolist() for i in range(len(self))]
        return [r[::-1] for r in rows] if reverse else rows

    def padded(self, index: np.ndarray, width: int, pad: int, reverse: bool = False,
               limit: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``index`` as a (B, width) int64 matrix padded with ``pad``, and their lengths;
        ``reverse``: each row's ids reversed; ``limit`` > 0: rows cut to their first ``limit`` ids."""
        index = np.asarray(index, np.int64)
        lengths = np.asarray(self.lengths[index], np.int64)
        if limit > 0:
            lengths = np.minimum(lengths, limit)
        starts = np.asarray(self.offsets[index], np.int64)
        cols = np.arange(width, dtype=np.int64)
        inside = cols[None, :] < lengths[:, None]
        at = (starts[:, None] + lengths[:, None] - 1 - cols[None, :]) if reverse else starts[:, None] + cols[None, :]
        out = np.full((len(index), width), pad, np.int64)
        out[inside] = self.ids[at[inside]]
        return out, lengths

    def release(self) -> None:
        """Drop this process's resident pages of the mapped arrays (see the module docstring)."""
        for array in (self.ids, self.offsets, self.lengths):
            release(array)


def release(array: np.ndarray) -> None:
    """MADV_DONTNEED on a memory-mapped array's mapping (nothing for an in-memory array)."""
    mapped = getattr(array, "_mmap", None)
    if isinstance(mapped, mmap.mmap) and hasattr(mapped, "madvise"):
        try:
            mapped.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):  # a closed map, or a system without it: only memory is at stake
            pass


def write_npy_header(f, dtype: np.dtype, count: int) -> None:
    """The header of a one-dimensional ``.npy`` file of ``count`` items; the data follows as raw
    bytes (streamed by the writer, so nothing the size of the corpus is held in memory)."""
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
            "shape": (int(count),)})


def npy_path(prefix: str | os.PathLike, suffix: str) -> Path:
    return Path(f"{prefix}.{suffix}.npy")
