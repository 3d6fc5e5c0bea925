"""Length-bucketed batches, built from length arrays with numpy, and their padded tensors.

An epoch's batches are a function of (seed, epoch) only, so a resumed run sees exactly the
batches it would have seen and data-parallel ranks can each take every N-th batch. Two regimes:

- **up to ``pool`` sentences** (every corpus attnmt was used on before, the Bible's 28 k pairs):
  lengths ``max(|x|, |y|)`` get a uniform jitter in [0, 1.5) (so buckets vary per epoch), the
  sentences are sorted by them, and batches are cut greedily: a sentence joins the open batch
  while ``size · count <= batch_size`` (size = the longest of ``|y| + 1`` and ``|x|`` so far, by
  tokens) or while it holds fewer than ``batch_size`` sentences (by sents). The batch order is
  then shuffled. This is the bucketing of earlier versions, batch for batch.
- **more sentences**: they are shuffled, cut into pools of ``pool`` sentences, each pool is sorted
  by size (a radix sort: sizes are small integers) and cut by the same greedy rule (with sizes
  sorted, a pool's batches come from its runs of equal size, not from a loop over sentences);
  then the batch order is shuffled. Every buffer is one int32/int64 array over the epoch's
  sentences (OpenNMT-py's buckets and Marian's maxi-batches bound the sort the same way).

``collate_rows`` builds a ``Batch`` from ``Ragged`` rows with numpy gathers; ``collate`` does it
for Python lists (search, tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnmt.data.ragged import Ragged
from attnmt.data.vocab import BOS, EOS, PAD

POOL = 1_000_000  # sentences sorted together (train.bucket_pool)
JITTER = 1.5


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids, padded with PAD
    src_lengths: torch.Tensor  # (B,)
    tgt_in: torch.Tensor  # (B, T) [<s>, y_1 .. y_n] padded
    tgt_out: torch.Tensor  # (B, T) [y_1 .. y_n, </s>] padded
    index: torch.Tensor  # (B,) position of each sentence in the dataset

    @property
    def target_tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out, self.index)))


class Batches:
    """An epoch's batches: batch k holds ``order[bounds[b]:bounds[b+1]]`` for b = ``sequence[k]``."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, sequence: np.ndarray):
        self.order, self.bounds, self.sequence = order, bounds, sequence

    def __len__(self) -> int:
        return len(self.sequence)

    def __getitem__(self, k: int) -> np.ndarray:
        b = int(self.sequence[k])
        return np.asarray(self.order[self.bounds[b] : self.bounds[b + 1]], np.int64)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[k] for k in range(len(self)))

    def take(self, rank: int, world: int) -> "Batches":
        """This rank's share: every ``world``-th batch from ``rank``, the same count on every rank."""
        usable = len(self.sequence) - len(self.sequence) % world
        return Batches(self.order, self.bounds, self.sequence[rank:usable:world])

    def lists(self) -> list[list[int]]:
        return [self[k].tolist() for k in range(len(self))]


def epoch_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_size: int,
                  by: str = "sents", shuffle: bool = True, seed: int = 0, epoch: int = 0,
                  items: np.ndarray | None = None, pool: int = POOL) -> Batches:
    """The batches of the sentences ``items`` (default: all) of one epoch (module docstring).
    ``src_lengths``/``tgt_lengths``: every sentence's length (any integer dtype; memory-mapped
    arrays are read, not copied whole)."""
    if items is None:
        n = len(tgt_lengths)
        items = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    rng = np.random.default_rng([seed, epoch])
    if len(items) <= pool or not shuffle:
        return _whole(src_lengths, tgt_lengths, batch_size, by, shuffle, rng, items)
    return _pooled(src_lengths, tgt_lengths, batch_size, by, rng, items, pool)


def _sizes(src_lengths, tgt_lengths, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max(|x|, |y|), max(|y| + 1, |x|)) of ``items`` as int64."""
    ls = np.asarray(src_lengths[items], np.int64)
    lt = np.asarray(tgt_lengths[items], np.int64)
    return np.maximum(ls, lt), np.maximum(lt + 1, ls)


def _whole(src_lengths, tgt_lengths, batch_size, by, shuffle, rng, items) -> Batches:
    longest, size = _sizes(src_lengths, tgt_lengths, items)
    key = longest.astype(np.float64)
    if shuffle:
        key += rng.uniform(0, JITTER, size=len(key))
    order = np.argsort(key, kind="stable")
    bounds = _cut(size[order], batch_size, by, sorted_sizes=False)
    sequence = np.arange(len(bounds) - 1)
    if shuffle:
        rng.shuffle(sequence)
    return Batches(items[order], bounds, sequence)


def _pooled(src_lengths, tgt_lengths, batch_size, by, rng, items, pool) -> Batches:
    order = items.copy()
    rng.shuffle(order)
    bounds = [np.zeros(1, np.int64)]
    for start in range(0, len(order), pool):
        part = order[start : start + pool]
        _, size = _sizes(src_lengths, tgt_lengths, part)
        small = size.astype(np.uint16) if size.max(initial=0) < 1 << 16 else size
        by_size = np.argsort(small, kind="stable")  # radix sort for 16-bit keys
        order[start : start + len(part)] = part[by_size]
        bounds.append(start + _cut(size[by_size], batch_size, by, sorted_sizes=True)[1:])
    bounds = np.concatenate(bounds)
    sequence = np.arange(len(bounds) - 1)
    rng.shuffle(sequence)
    return Batches(order, bounds, sequence)


def _cut(size: np.ndarray, batch_size: int, by: str, sorted_sizes: bool) -> np.ndarray:
    """Batch boundaries (0 .. n) of sentences in this order, by the greedy rule."""
    n = len(size)
    if n == 0:
        return np.zeros(1, np.int64)
    if by == "sents":
        return np.append(np.arange(0, n, max(batch_size, 1), dtype=np.int64), n)
    if sorted_sizes:
        return _cut_sorted(size, batch_size)
    bounds, a = [0], 0
    while a < n:
        # the batch from a ends at the first sentence that would not fit; cummax >= size[a], so
        # it lies within batch_size // size[a] + 1 sentences
        w = min(n - a, batch_size // max(int(size[a]), 1) + 1)
        over = np.maximum.accumulate(size[a : a + w]) * np.arange(1, w + 1) > batch_size
        over[0] = False
        a += int(np.argmax(over)) if over.any() else w
        bounds.append(a)
    return np.array(bounds, np.int64)


def _cut_sorted(size: np.ndarray, batch_size: int) -> np.ndarray:
    """The greedy rule for non-decreasing sizes, a run of equal sizes at a time."""
    starts = np.flatnonzero(np.diff(size, prepend=-1))
    ends = np.append(starts[1:], len(size))
    bounds: list[np.ndarray] = [np.zeros(1, np.int64)]
    count = 0  # sentences in the open batch (all of them smaller than this run's)
    for s, pos, end in zip(size[starts].tolist(), starts.tolist(), ends.tolist()):
        fits = max(batch_size // max(s, 1), 1)  # sentences of this size a batch holds
        if count:
            k = min(max(fits - count, 0), end - pos)
            count, pos = count + k, pos + k
            if pos < end:  # the next one does not fit: the open batch is closed
                bounds.append(np.array([pos], np.int64))
                count = 0
        if pos < end:
            full = (end - pos) // fits
            bounds.append(pos + fits * np.arange(1, full + 1, dtype=np.int64))
            count = end - pos - full * fits
    if count:
        bounds.append(np.array([len(size)], np.int64))
    return np.concatenate(bounds)


# -- tensors ------------------------------------------------------------------------------------
def collate_rows(src: Ragged | np.ndarray | None, tgt: Ragged | None, index: np.ndarray,
                 reverse_source: bool = False, tgt_limit: int = 0) -> Batch:
    """The batch of rows ``index``: ``src`` a Ragged, a column of one id per row (an LM's domain),
    or None (an LM: no source); ``tgt`` None for a source-only batch; ``tgt_limit`` > 0 cuts
    targets (an LM's data.max_len)."""
    index = np.asarray(index, np.int64)
    B = len(index)
    if src is None:
        src_ids, src_len = np.zeros((B, 0), np.int64), np.zeros(B, np.int64)
    elif isinstance(src, np.ndarray):
        src_ids, src_len = np.asarray(src[index], np.int64).reshape(B, 1), np.ones(B, np.int64)
    else:
        width = int(np.max(src.lengths[index], initial=0))
        src_ids, src_len = src.padded(index, width, PAD, reverse=reverse_source)
    batch_index = torch.from_numpy(index)
    if tgt is None:
        empty = torch.zeros((B, 0), dtype=torch.long)
        return Batch(torch.from_numpy(src_ids), torch.from_numpy(src_len), empty, empty, batch_index)
    width = int(np.max(tgt.lengths[index], initial=0))
    if tgt_limit > 0:
        width = min(width, tgt_limit)
    ids, lengths = tgt.padded(index, width, PAD, limit=tgt_limit)
    tgt_in = np.full((B, width + 1), PAD, np.int64)
    tgt_in[:, 0] = BOS
    tgt_in[:, 1:] = ids
    tgt_out = np.full((B, width + 1), PAD, np.int64)
    tgt_out[:, :width] = ids
    tgt_out[np.arange(B), lengths] = EOS
    return Batch(torch.from_numpy(src_ids), torch.from_numpy(src_len), torch.from_numpy(tgt_in),
                 torch.from_numpy(tgt_out), batch_index)


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None,
            index: Sequence[int]) -> Batch:
    """``collate_rows`` for Python lists; ``index`` is what the batch records as positions."""
    batch = collate_rows(Ragged.from_lists(src), None if tgt is None else Ragged.from_lists(tgt),
                         np.arange(len(src)))
    batch.index = torch.as_tensor(list(index), dtype=torch.long)
    return batch


# -- lists (small sets: dev data, evaluation) -----------------------------------------------------
def _lengths(seqs: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter((len(s) for s in seqs), np.int64, count=len(seqs))


def make_batches(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], batch_size: int,
                 by: str = "sents", shuffle: bool = True, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """``epoch_batches`` of Python lists, as index lists."""
    return epoch_batches(_lengths(src), _lengths(tgt), batch_size, by, shuffle, seed, epoch).lists()


def iterate_batches(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]],
                    index_batches: list[list[int]]) -> Iterator[Batch]:
    for idx in index_batches:
        yield collate([src[i] for i in idx], [tgt[i] for i in idx], idx)


def encode_corpus(tokenizer, lines: list[str], reverse: bool = False) -> list[list[int]]:
    ids = [tokenizer.encode(line) for line in lines]
    return [seq[::-1] for seq in ids] if reverse else ids


def filter_by_length(src: list[list[int]], tgt: list[list[int]], max_len: int
                     ) -> tuple[list[list[int]], list[list[int]], int]:
    """Drop pairs with either side longer than max_len tokens (the paper: 50) or empty; returns
    the count."""
    keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if len(s) <= max_len and len(t) <= max_len and s and t]
    return [src[i] for i in keep], [tgt[i] for i in keep], len(src) - len(keep)
