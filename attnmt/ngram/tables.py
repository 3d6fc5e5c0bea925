"""Where a model's per-order tables live while they are written out: in memory or on disk.

Writers (ARPA, binary) read any model through ``read(k, start, stop)``, a block of rows of order k
as an :class:`~attnmt.ngram.estimate.OrderTable`, so the in-memory estimator and the streaming one
share one writer and give byte-identical files. Rows of order k are sorted by (prefix, word), so
the prefixes of a block of rows are non-decreasing and cover one contiguous range of order k-1:
following the prefix chain of a block reads one contiguous range per lower order.
"""

from __future__ import annotations

import numpy as np

from attnmt.ngram.estimate import OrderTable
from attnmt.ngram.external import Column


class MemoryTables:
    """A model held as a list of OrderTables."""

    def __init__(self, tables: list[OrderTable]):
        self.tables = tables
        self.order = len(tables)

    def size(self, k: int) -> int:
        return len(self.tables[k - 1].word)

    def read(self, k: int, start: int, stop: int) -> OrderTable:
        t = self.tables[k - 1]
        return OrderTable(t.word[start:stop], t.prefix[start:stop], t.logp[start:stop],
                          t.logb[start:stop])

    def column(self, k: int, name: str, start: int, stop: int) -> np.ndarray:
        return getattr(self.tables[k - 1], name)[start:stop]


class DiskTables:
    """A model held as columns on disk (word int32, prefix int64, logp, logb float32 per order)."""

    def __init__(self, columns: list[dict[str, Column]]):
        self.columns = columns
        self.order = len(columns)

    def size(self, k: int) -> int:
        return len(self.columns[k - 1]["word"])

    def read(self, k: int, start: int, stop: int) -> OrderTable:
        c = self.columns[k - 1]
        return OrderTable(c["word"].read(start, stop), c["prefix"].read(start, stop),
                          c["logp"].read(start, stop), c["logb"].read(start, stop))

    def column(self, k: int, name: str, start: int, stop: int) -> np.ndarray:
        return self.columns[k - 1][name].read(start, stop)


def block_words(tables, k: int, block: OrderTable) -> np.ndarray:
    """Word ids (N, k) of a block of consecutive order-k rows, following the prefix chain."""
    out = np.empty((len(block.word), k), np.int64)
    out[:, k - 1] = block.word
    prefix = block.prefix
    for j in range(k - 1, 0, -1):
        if len(prefix) == 0:
            break
        lo, hi = int(prefix.min()), int(prefix.max()) + 1
        lower = tables.read(j, lo, hi)
        out[:, j - 1] = lower.word[prefix - lo]
        prefix = lower.prefix[prefix - lo]
    return out
