"""Arrays on disk for the streaming estimator: append-only columns and the merge of sorted runs.

A ``Column`` is a flat binary file of one numpy dtype, written by appending blocks and read back
by index ranges (plain reads, no memory map, so what was read is freed with the block and the
process's resident memory stays at the blocks in use).

``merge_runs`` is the external sort's merge step: runs of strictly increasing int64 keys (each run
the distinct n-grams of one corpus chunk, with their counts and suffix indices) become one sorted
table of distinct keys with summed counts, plus, for every run, the table index of each of its
entries (how the chunk's positions learn the global index of their n-gram).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class Column:
    """A 1-D array of ``dtype`` in the file ``path``: ``append`` blocks, then ``read`` ranges."""

    def __init__(self, path: str | os.PathLike, dtype, length: int | None = None):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self._out = None
        if length is None:  # a new, empty column
            self._out = open(self.path, "wb")  # noqa: SIM115 - closed by finish()
            self.length = 0
        else:
            self.length = length

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        self._out.write(memoryview(block).cast("B"))
        self.length += len(block)

    def finish(self) -> Column:
        if self._out is not None:
            self._out.close()
            self._out = None
        return self

    def __len__(self) -> int:
        return self.length

    def read(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        stop = self.length if stop is None else min(stop, self.length)
        if stop <= start:
            return np.zeros(0, self.dtype)
        with open(self.path, "rb") as f:
            f.seek(start * self.dtype.itemsize)
            return np.fromfile(f, self.dtype, stop - start)

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(start, block) over the column in blocks of ``size`` entries."""
        with open(self.path, "rb") as f:
            for start in range(0, self.length, size):
                yield start, np.fromfile(f, self.dtype, min(size, self.length - start))

    def delete(self) -> None:
        self.finish()
        self.path.unlink(missing_ok=True)


class Columns:
    """Named columns of equal length sharing a file prefix (``PREFIX.name``)."""

    def __init__(self, prefix: str | os.PathLike, dtypes: dict):
        self.cols = {name: Column(f"{prefix}.{name}", dt) for name, dt in dtypes.items()}

    def append(self, **blocks: np.ndarray) -> None:
        for name, block in blocks.items():
            self.cols[name].append(block)

    def finish(self) -> Columns:
        for c in self.cols.values():
            c.finish()
        return self

    def __getitem__(self, name: str) -> Column:
        return self.cols[name]

    def __len__(self) -> int:
        return len(next(iter(self.cols.values())))

    def read(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {name: c.read(start, stop) for name, c in self.cols.items()}

    def delete(self) -> None:
        for c in self.cols.values():
            c.delete()


class _RunReader:
    """Buffered sequential reader of one run (keys, counts, suffixes)."""

    def __init__(self, run: Columns, size: int):
        self.run, self.size, self.pos = run, size, 0
        self.keys = self.counts = self.suffix = np.zeros(0, np.int64)

    def fill(self) -> None:
        if len(self.keys) == 0 and self.pos < len(self.run):
            part = self.run.read(self.pos, self.pos + self.size)
            self.keys, self.counts, self.suffix = part["key"], part["count"], part["suffix"]
            self.pos += len(self.keys)

    @property
    def at_end(self) -> bool:
        """Whether the buffer holds the run's last entry (nothing left on disk)."""
        return self.pos >= len(self.run)

    def take(self, bound) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The buffered entries with key <= bound (removed from the buffer)."""
        t = len(self.keys) if bound is None else int(np.searchsorted(self.keys, bound, "right"))
        out = self.keys[:t], self.counts[:t], self.suffix[:t]
        self.keys, self.counts, self.suffix = self.keys[t:], self.counts[t:], self.suffix[t:]
        return out


def merge_runs(runs: list[Columns], out: Columns, maps: list[Column], buffer: int,
               progress=None) -> None:
    """Merge sorted runs (columns key/count/suffix, keys strictly increasing within a run) into
    ``out`` (distinct keys in increasing order, counts summed, the suffix of the first run that has
    the key: every run gives the same one). maps[r] receives, for every entry of run r in order,
    the index of its key in ``out``. ``buffer``: entries read from each run at a time.
    """
    readers = [_RunReader(r, max(1, buffer)) for r in runs]
    base = 0
    while True:
        for r in readers:
            r.fill()
        live = [r for r in readers if len(r.keys)]
        if not live:
            break
        # Everything up to the smallest last buffered key of a run with more on disk is complete.
        limits = [r.keys[-1] for r in live if not r.at_end]
        bound = min(limits) if limits else None
        parts = [r.take(bound) for r in readers]
        keys = np.concatenate([p[0] for p in parts])
        counts = np.concatenate([p[1] for p in parts])
        suffix = np.concatenate([p[2] for p in parts])
        order = np.argsort(keys, kind="stable")  # merges the sorted pieces (timsort finds them)
        sorted_keys = keys[order]
        first = np.ones(len(keys), bool)
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
        starts = np.nonzero(first)[0]
        out.append(key=sorted_keys[starts], count=np.add.reduceat(counts[order], starts),
                   suffix=suffix[order[starts]])
        index = np.empty(len(keys), np.int64)
        index[order] = base + np.cumsum(first) - 1
        base += len(starts)
        at = 0
        for r, p in enumerate(parts):
            n = len(p[0])
            maps[r].append(index[at : at + n])
            at += n
        if progress is not None:
            progress.update(len(keys))
    out.finish()
    for m in maps:
        m.finish()
