"""Streaming modified-Kneser–Ney estimation in bounded memory: the model of
:func:`attnmt.ngram.estimate.kneser_ney`, number for number, for corpora larger than memory.

The equations and conventions are those of :mod:`attnmt.ngram.estimate`; what changes is where the
arrays live. Everything proportional to the corpus or to the number of n-grams is a column on disk
(:mod:`attnmt.ngram.external`), read and written in blocks sized from the memory budget:

1. The text becomes a column of int32 ids (``<s> w1 .. wm </s>`` per line), cut into chunks of
   whole sentences.
2. Counting, order by order (k = 2..n). In each chunk, the k-gram ending at position p has the key
   ``index of the (k-1)-gram ending at p-1 * V + word p`` (the in-memory keys). Sorting the keys
   gives the chunk's distinct k-grams, their counts and suffix indices (a sorted run on disk); the
   order-2 sort is a full one, and from then on the positions are visited in the previous order's
   sorted order, where the keys are almost sorted (see ``_count_chunk``). Merging the runs gives
   the order's table (sorted by key = by prefix, then word: the in-memory order) and, per chunk,
   local -> global index maps for the next order's keys.
3. Adjusted counts, counts of counts and discounts, order by order; a continuation count of order
   k is a histogram of order k+1's suffix indices.
4. Probabilities and backoffs, k = 2..n, in blocks of whole contexts (rows are sorted by prefix,
   so every context is contiguous): u, gamma and the interpolation with the previous order are the
   in-memory formulas applied to the same values in the same summation order, so every float64 is
   the same and the ARPA files are byte-identical.

Resident besides the blocks: the vocabulary, and during step 3/4 the previous order's
probabilities (8 bytes per n-gram) and one order's continuation counts (8 bytes per n-gram); the
blocks get what the budget leaves.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnmt.data.vocab import BOS, PAD
from attnmt.errors import UserError
from attnmt.ngram.corpus import PreparedBlocks, TextBlocks
from attnmt.ngram.estimate import (
    FALLBACK_DISCOUNTS,
    counts_of_counts,
    discounts_from_counts,
    prune_thresholds,
    unigram_probs,
)
from attnmt.ngram.external import Column, Columns, merge_runs
from attnmt.ngram.tables import DiskTables

BYTES_PER_TOKEN = 100  # temporaries of one counting chunk (ids, positions, keys, sort order)
BYTES_PER_ENTRY = 200  # temporaries of one block of n-grams in steps 3-4 and the merge
MAX_BLOCK = 1 << 20  # n-grams per block in steps 3-4: larger blocks save no time
BASE = 150 << 20  # the interpreter and numpy
RUN = {"key": np.int64, "count": np.int64, "suffix": np.int64}
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(text: str) -> int:
    """Bytes of a budget like lmplz's -S: '4G', '512M', '1.5G', '80%' (of physical memory)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGTB%]?)\s*", text.upper())
    if not m:
        raise UserError(f"--memory: bad memory size {text!r}: use e.g. 4G, 512M or 50%")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        if value > 100:  # more than all of the memory there is: a typo, not a budget
            raise UserError(f"--memory {text.strip()}: a share of physical memory is at most 100%")
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        size = int(total * value / 100)
    else:
        size = int(value * _UNITS[unit])
    if size < 1 << 16:
        raise UserError(f"--memory: memory size {text!r} is too small: give at least 64K")
    return size


@dataclass
class Budget:
    """The memory budget, shared out to chunks and blocks after what must stay resident."""

    total: int
    resident: int = 0
    warned: bool = field(default=False, repr=False)

    def free(self) -> int:
        left = self.total - BASE - self.resident
        if left < self.total // 8:
            if not self.warned:
                print(f"attnmt: warning: the memory budget ({self.total >> 20} MiB) is smaller "
                      f"than what the build keeps resident ({(BASE + self.resident) >> 20} MiB); "
                      "continuing with small blocks", file=sys.stderr)
                self.warned = True
            left = self.total // 8
        return left

    def tokens(self) -> int:
        return max(64, self.free() // BYTES_PER_TOKEN)

    def entries(self, ways: int = 1) -> int:
        return max(16, min(MAX_BLOCK, self.free() // BYTES_PER_ENTRY) // ways)


def _bar(total, desc: str, unit: str, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not progress,
                file=sys.stderr, mininterval=1.0, leave=False)


class _Corpus:
    """The token column and its chunks of whole sentences."""

    def __init__(self, work: Path, budget: Budget):
        self.ids = Column(work / "tokens.i32", np.int32)
        self.chunk = budget.tokens()
        self.bounds = [0]  # chunk starts; each is a <s>
        self.last_bos = -1  # the last <s> seen after the current chunk start
        self.unigrams = np.zeros(0, np.int64)
        self.sentences = 0
        self.words = 0

    def add(self, flat: np.ndarray) -> None:
        offset = len(self.ids)
        self.ids.append(flat)
        counts = np.bincount(flat, minlength=len(self.unigrams))
        counts[: len(self.unigrams)] += self.unigrams
        self.unigrams = counts
        bos = offset + np.nonzero(flat == BOS)[0]
        self.sentences += len(bos)
        self.words += len(flat) - 2 * len(bos)
        if self.last_bos > self.bounds[-1]:
            bos = np.concatenate([[self.last_bos], bos])
        end = offset + len(flat)
        while self.bounds[-1] + self.chunk < end:
            start = self.bounds[-1]
            later = bos[bos > start]
            if len(later) == 0:
                break
            fit = later[later <= start + self.chunk]
            self.bounds.append(int(fit[-1] if len(fit) else later[0]))  # a long sentence: whole
        if len(bos):
            self.last_bos = int(bos[-1])

    def finish(self) -> list[tuple[int, int]]:
        self.ids.finish()
        bounds = self.bounds + [len(self.ids)]
        return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _count_order(k: int, order: int, V: int, corpus: Column, chunks, prev, work: Path,
                 budget: Budget, progress: bool):
    """Step 2 for order k: the table (columns key/count/suffix) and, for each chunk, what order
    k+1 needs (see _count_chunk) plus its local -> global index map (None: the identity)."""
    runs, states = [], []
    with _bar(len(corpus), f"count {k}-grams", "tok", progress) as bar:
        for c, (s, e) in enumerate(chunks):
            run, state = _count_chunk(k, k < order, V, corpus.read(s, e),
                                      prev[c] if prev else None, work / f"{k}.{c}")
            runs.append(run)
            states.append(state)
            bar.update(e - s)
    if len(runs) == 1:
        table = runs[0]
        maps = [None]
    else:
        table = Columns(work / f"table{k}", RUN)
        maps = [Column(work / f"map{k}.{c}", np.int64) for c in range(len(runs))]
        total = sum(len(r) for r in runs)
        with _bar(total, f"merge {k}-grams", "n-gram", progress) as bar:
            merge_runs(runs, table, maps, budget.entries(len(runs)), bar)
        for r in runs:
            r.delete()
    if k == order:
        return table, None
    for state, m in zip(states, maps):
        state["map"] = m
    return table, states


def _count_chunk(k: int, more: bool, V: int, t: np.ndarray, prev: dict | None, prefix: Path):
    """The sorted run of one chunk's k-grams, and (if ``more``) the chunk's state for order k+1.

    State, in the chunk's local numbering (index among the chunk's distinct k-grams, in table
    order): P, the positions where a k-gram ends, sorted by k-gram; rank, the local index of the
    k-gram at each P; g, the local index of the k-gram ending at each position (-1: none). The
    k+1-grams end at P + 1 (unless a sentence starts there), and in that order their prefixes are
    already sorted: only the last words of equal prefixes are out of order, which a stable sort
    (timsort: it finds the sorted stretches) puts right almost for free. Order 2 sorts in full.
    """
    N = len(t)
    if prev is None:  # order 2: the prefix is the previous word, its index the word id
        q = np.flatnonzero(t[1:] != BOS) + 1
        prefix_index = t[q - 1].astype(np.int64)
        g_prev, to_global = t, None
    else:
        q = prev["P"].read() + 1
        keep = q < N
        keep[keep] = t[q[keep]] != BOS
        q = q[keep]
        prefix_index = prev["rank"].read()[keep].astype(np.int64)
        g_prev = prev["g"].read()
        to_global = prev["map"].read() if prev["map"] is not None else None
        for col in prev.values():
            if col is not None:
                col.delete()
    keys = prefix_index * V + t[q]
    order = np.argsort(keys) if prev is None else np.argsort(keys, kind="stable")
    keys = keys[order]
    P = q[order]
    new = np.empty(len(keys), bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    uniq, suffix = keys[starts], g_prev[P[starts]].astype(np.int64)
    if to_global is not None:  # local -> global prefix and suffix indices (a monotone map)
        uniq = to_global[uniq // V] * V + uniq % V
        suffix = to_global[suffix]
    run = Columns(f"{prefix}.run", RUN)
    run.append(key=uniq, count=np.diff(starts, append=len(keys)), suffix=suffix)
    run.finish()
    if not more:
        return run, None
    rank = (np.cumsum(new) - 1).astype(np.int32)
    g = np.full(N, -1, np.int32)
    g[P] = rank
    state = {}
    for name, values in (("P", P.astype(np.int32)), ("rank", rank), ("g", g)):
        state[name] = Column(f"{prefix}.{name}", np.int32)
        state[name].append(values)
        state[name].finish()
    return run, state


def _blocks(n: int, size: int):
    for start in range(0, n, size):
        yield start, min(n, start + size)


def _context_blocks(table: Columns, a: Column, V: int, size: int):
    """Blocks (start, key, count, suffix, a) of whole contexts of a table sorted by key."""
    n = len(table)
    start = 0
    while start < n:
        stop = min(n, start + size)
        while True:
            key = table["key"].read(start, stop)
            if stop == n:
                cut = len(key)
                break
            prefix = key // V
            cut = int(np.searchsorted(prefix, prefix[-1], "left"))  # the last context may go on
            if cut > 0:
                break
            stop = min(n, start + 2 * (stop - start))
        key = key[:cut]
        yield (start, key, table["count"].read(start, start + cut),
               table["suffix"].read(start, start + cut), a.read(start, start + cut))
        start += cut


def estimate_stream(
    path: str | os.PathLike | PreparedBlocks,
    order: int = 5,
    tokenizer=None,
    prune: list[int] | None = None,
    discount_fallback: tuple[float, float, float] | None = FALLBACK_DISCOUNTS,
    memory: int = 1 << 30,
    work_dir: str | os.PathLike | None = None,
    progress: bool = False,
):
    """Estimate from a text file (or a prepared corpus's ids: ``PreparedBlocks``) within ``memory`` bytes (plus the resident arrays of the module
    docstring). Returns (vocab, tables, info, cleanup): tables is a DiskTables in a temporary
    directory under ``work_dir`` (default: the system's), removed by calling ``cleanup()``.
    """
    if order < 1:
        raise UserError(f"the n-gram order must be >= 1, got {order}")
    thresholds = prune_thresholds(prune, order)
    work = Path(tempfile.mkdtemp(prefix="attnmt-ngram-", dir=work_dir))

    def cleanup():
        shutil.rmtree(work, ignore_errors=True)

    try:
        vocab, tables, info = _estimate(path, order, tokenizer, thresholds, discount_fallback,
                                        Budget(memory), work, progress)
    except BaseException:
        cleanup()
        raise
    return vocab, tables, info, cleanup


def _estimate(path, order, tokenizer, thresholds, fallback, budget: Budget, work: Path, progress):
    # -- 1. text -> id column ------------------------------------------------------------------
    corpus = _Corpus(work, budget)
    reader = path if isinstance(path, PreparedBlocks) else TextBlocks(path, tokenizer)
    with _bar(None, "read", "tok", progress) as bar:
        for flat in reader.blocks():
            corpus.add(flat)
            bar.update(len(flat))
    vocab = reader.vocab
    V = len(vocab)
    chunks = corpus.finish()
    unigram_counts = np.zeros(V, np.int64)
    unigram_counts[: len(corpus.unigrams)] = corpus.unigrams
    budget.resident = 100 * V  # the vocabulary (strings and dict) and unigram arrays

    # -- 2. counts, order by order ----------------------------------------------------------------
    raw: list[Columns] = []
    prev = None
    for k in range(2, order + 1):
        table, prev = _count_order(k, order, V, corpus.ids, chunks, prev, work, budget, progress)
        raw.append(table)
    corpus.ids.delete()
    sizes = [V] + [len(t) for t in raw]

    # -- 3. adjusted counts and discounts ---------------------------------------------------------
    # a_k: raw count for the top order and n-grams starting with <s>, else the continuation count
    adjusted: list[Column | np.ndarray] = []
    coc = []
    bos_prev = None  # bos-start flags of order k-1, as a column
    for k in range(1, order + 1):
        if k < order:
            budget.resident = 100 * V + 8 * sizes[k - 1]
            cont = np.zeros(sizes[k - 1], np.int64)
            for s, e in _blocks(sizes[k], budget.entries()):
                np.add.at(cont, raw[k - 1]["suffix"].read(s, e), 1)
        if k == 1:
            a = np.where(np.arange(V) == BOS, unigram_counts, cont) if order > 1 \
                else unigram_counts.copy()
            a[BOS] = 0
            a[PAD] = 0
            adjusted.append(a)
            coc.append(counts_of_counts(a))
            continue
        a_col = Column(work / f"adjusted{k}", np.int64)
        bos_col = Column(work / f"bos{k}", np.bool_) if k < order else None
        t = np.zeros(5, np.int64)
        for s, e in _blocks(sizes[k - 1], budget.entries()):
            prefix = raw[k - 2]["key"].read(s, e) // V
            count = raw[k - 2]["count"].read(s, e)
            if k == 2:
                bos = prefix == BOS
            else:
                lo = int(prefix[0])
                bos = bos_prev.read(lo, int(prefix[-1]) + 1)[prefix - lo]
            a = count if k == order else np.where(bos, count, cont[s:e])
            t += counts_of_counts(a)
            a_col.append(a)
            if bos_col is not None:
                bos_col.append(bos)
        adjusted.append(a_col.finish())
        coc.append(t)
        if bos_prev is not None:
            bos_prev.delete()
        bos_prev = bos_col.finish() if bos_col is not None else None
        cont = None
    discounts, fell_back = [], []
    for k in range(1, order + 1):
        d, fb = discounts_from_counts(coc[k - 1], fallback, k)
        discounts.append(d)
        fell_back.append(fb)

    # -- 4. probabilities and backoffs, then the final tables ----------------------------------
    p_prev = unigram_probs(adjusted[0], discounts[0], V)
    final = []
    keep_index = None  # order k-1's new index of each entry, when pruning removed some
    for k in range(2, order + 1):
        budget.resident = 100 * V + 8 * sizes[k - 2]
        table, D, thr = raw[k - 2], discounts[k - 1], thresholds[k - 1]
        p_col = Column(work / f"p{k}", np.float64)
        gamma_col = Column(work / f"gamma{k - 1}", np.float64)
        with _bar(sizes[k - 1], f"probabilities {k}-grams", "n-gram", progress) as bar:
            for _, key, count, suffix, a in _context_blocks(table, adjusted[k - 1], V,
                                                             budget.entries()):
                prefix = key // V
                lo, hi = (int(prefix[0]), int(prefix[-1]) + 1) if len(key) else (0, 0)
                local = prefix - lo
                d = D[np.minimum(a, 3)]
                keep = count > thr
                af = a.astype(np.float64)
                denom = np.bincount(local, weights=af, minlength=hi - lo)
                num = np.bincount(local, weights=np.where(keep, d, af), minlength=hi - lo)
                is_ctx = denom > 0
                gamma = np.where(is_ctx, num / np.where(is_ctx, denom, 1.0), 1.0)
                u = (af - d) / denom[local]
                p_col.append(u + gamma[local] * p_prev[suffix])
                gamma_col.append(np.ones(lo - len(gamma_col)))  # contexts without extensions
                gamma_col.append(gamma)
                bar.update(len(key))
        gamma_col.append(np.ones(sizes[k - 2] - len(gamma_col)))
        gamma_col.finish()
        final.append(_finish_order(k - 1, raw, p_prev, gamma_col, thresholds, keep_index, V,
                                   work, budget))
        keep_index = final[-1].pop("index", None)
        gamma_col.delete()
        if k > 2:
            adjusted[k - 2].delete()
        p_prev = p_col.finish().read()
        p_col.delete()
    final.append(_finish_order(order, raw, p_prev, None, thresholds, keep_index, V, work,
                               budget, last=True))
    if order > 1:
        adjusted[order - 1].delete()
    for t in raw:
        t.delete()

    counts = [len(c["word"]) for c in final]
    info = {
        "order": order,
        "discounts": [[float(x) for x in d[1:]] for d in discounts],
        "discount_fallback": [k + 1 for k, fb in enumerate(fell_back) if fb],
        "prune": thresholds,
        "counts": counts,
        "tokens": corpus.words,
        "sentences": corpus.sentences,
    }
    return vocab, DiskTables(final), info


def _finish_order(k, raw, p, gamma: Column | None, thresholds, prev_index, V, work, budget,
                  last: bool = False) -> dict:
    """Order k's final columns (kept entries, log10, renumbered prefixes), as estimate._finish."""
    out = {name: Column(work / f"final{k}.{name}", dt) for name, dt in
           (("word", np.int32), ("prefix", np.int64), ("logp", np.float32),
            ("logb", np.float32))}
    n = len(p)
    # order k+1's prefixes need renumbering when entries of order k are dropped
    index = Column(work / f"index{k}", np.int64) if thresholds[k - 1] > 0 and not last else None
    kept = 0
    with np.errstate(divide="ignore"):
        for s, e in _blocks(n, budget.entries()):
            if k == 1:
                word, prefix = np.arange(s, e), np.zeros(e - s, np.int64)
                keep = np.ones(e - s, bool)
            else:
                key = raw[k - 2]["key"].read(s, e)
                word, prefix = key % V, key // V
                keep = raw[k - 2]["count"].read(s, e) > thresholds[k - 1]
                prefix = prefix[keep]
                if prev_index is not None and len(prefix):
                    lo = int(prefix[0])
                    prefix = prev_index.read(lo, int(prefix[-1]) + 1)[prefix - lo]
            if index is not None:
                index.append(kept + np.cumsum(keep) - 1)
            kept += int(keep.sum())
            logp = np.minimum(0.0, np.log10(p[s:e][keep])).astype(np.float32)
            if last:
                logb = np.zeros(int(keep.sum()), np.float32)
            else:
                logb = np.log10(gamma.read(s, e)[keep]).astype(np.float32)
            out["word"].append(word[keep])
            out["prefix"].append(prefix)
            out["logp"].append(logp)
            out["logb"].append(logb)
    for c in out.values():
        c.finish()
    if prev_index is not None:
        prev_index.delete()
    if index is not None:
        out["index"] = index.finish()
    return out

