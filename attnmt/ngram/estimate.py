"""Interpolated modified Kneser–Ney estimation (Chen & Goodman 1998), as KenLM's ``lmplz`` does it.

Everything is vectorised numpy over one flat int64 token array in which every sentence is laid out
as ``<s> w1 ... wm </s>`` (ids BOS/EOS from :mod:`attnmt.data.vocab`); no per-n-gram Python object
is ever made.

Counting. The n-grams of order k are the windows of k tokens that lie inside one padded sentence
and do not end on ``<s>`` (so ``<s>`` appears only as the first word, as in KenLM, where windows
with ``<s> <s>`` are collapsed away). An n-gram is identified by (index of its prefix (k-1)-gram,
last word); ``key = prefix * V + word`` is an exact int64, so ``np.unique`` over the keys of every
position gives the sorted table of order k, its raw counts and, through ``return_inverse``, the
index of the k-gram ending at each position, which is the prefix of order k+1. No hashing, no
collisions.

Adjusted counts (Chen & Goodman §3, KenLM's adjust_counts):

    a(w_1^k) = c(w_1^k)                       if k = n, or w_1 = <s>
    a(w_1^k) = N1+(• w_1^k) = |{v : c(v w_1^k) > 0}|   otherwise            (continuation count)

``a(<s>) = a(<pad>) = 0``. Discounts of order k from its counts-of-counts t_j = |{g : a(g) = j}|:

    Y = t1 / (t1 + 2 t2),   D1 = 1 - 2Y t2/t1,   D2 = 2 - 3Y t3/t2,   D3+ = 3 - 4Y t4/t3

Interpolation, with D(a) = D1, D2, D3+ for a = 1, 2, >= 3 (0 for a = 0):

    u(w | h)     = (a(h w) - D(a(h w))) / sum_x a(h x)
    gamma(h)     = (D1 N1(h •) + D2 N2(h •) + D3+ N3+(h •)) / sum_x a(h x)
    p(w | h)     = u(w | h) + gamma(h) p(w | h'),      h' = h without its first word
    p(w)         = u(w) + gamma() / |V|,  |V| = vocabulary without <pad> and <s>  (so <unk> and
                   every zero-count word get the same uniform share, as KenLM gives <unk>)

The ARPA backoff of context h is gamma(h) (1 where h is no context). ``<s>`` gets probability 1
(log 0), as lmplz writes it; it is never predicted.

Pruning (``prune=[0, 0, 1]``: drop n-grams of order >= 3 with raw count <= 1, as lmplz --prune):
thresholds per order, non-decreasing, the last one repeated; discounts use the unpruned
counts-of-counts and a pruned n-gram's whole adjusted count moves into its context's gamma, so the
model stays normalised.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.errors import UserError

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)  # lmplz --discount_fallback's default


@dataclass
class OrderTable:
    """The n-grams of one order, sorted by (prefix, word): the CSR layout queries need.

    For order 1 the table is dense over the vocabulary (entry i is word i, prefix 0).
    """

    word: np.ndarray  # int64 [n]
    prefix: np.ndarray  # int64 [n], index into the previous order's table
    logp: np.ndarray  # float32 [n], log10 p(word | prefix)
    logb: np.ndarray  # float32 [n], log10 backoff of this n-gram as a context (0 for the top order)


def sentence_positions(tokens: np.ndarray) -> np.ndarray:
    """Position of each token inside its padded sentence (0 at each ``<s>``)."""
    idx = np.arange(len(tokens), dtype=np.int64)
    start = np.where(tokens == BOS, idx, 0)
    np.maximum.accumulate(start, out=start)
    return idx - start


def counts_of_counts(adjusted: np.ndarray) -> np.ndarray:
    """t_0..t_4: how many entries have adjusted count 0, 1, 2, 3, 4 (int64)."""
    return np.bincount(np.minimum(adjusted, 5), minlength=6)[:5].astype(np.int64)


def compute_discounts(
    adjusted: np.ndarray, fallback: tuple[float, float, float] | None, order: int
) -> tuple[np.ndarray, bool]:
    """[0, D1, D2, D3+] from counts-of-counts (Chen & Goodman eq. 26) and whether it fell back."""
    return discounts_from_counts(counts_of_counts(adjusted), fallback, order)


def discounts_from_counts(
    coc: np.ndarray, fallback: tuple[float, float, float] | None, order: int
) -> tuple[np.ndarray, bool]:
    """compute_discounts from the counts of counts t_0..t_4."""
    t = np.asarray(coc, np.float64)
    ok = bool(t[1] > 0 and t[2] > 0 and t[3] > 0)
    d = np.zeros(4)
    if ok:
        y = t[1] / (t[1] + 2 * t[2])
        for j in (1, 2, 3):
            d[j] = j - (j + 1) * y * t[j + 1] / t[j]
            ok = ok and 0.0 <= d[j] <= j
    if ok:
        return d, False
    if fallback is None:
        raise UserError(
            f"cannot compute Kneser-Ney discounts for {order}-grams (counts of counts "
            f"{[int(x) for x in t[1:5]]}); the corpus is too small or artificial: "
            "allow fallback discounts"
        )
    return np.array([0.0, *fallback]), True


def count_orders(tokens: np.ndarray, vocab_size: int, order: int) -> list[dict]:
    """Raw counts of every order: per order a dict of word, prefix, suffix, count, bos_start."""
    V = np.int64(vocab_size)
    pos = sentence_positions(tokens)
    counts = np.bincount(tokens, minlength=vocab_size).astype(np.int64)
    vocab_ids = np.arange(vocab_size, dtype=np.int64)
    tables = [
        {
            "word": vocab_ids,
            "prefix": np.zeros(vocab_size, np.int64),
            "suffix": np.zeros(vocab_size, np.int64),
            "count": counts,
            "bos_start": vocab_ids == BOS,
        }
    ]
    ending = tokens  # index of the (k-1)-gram ending at each position (order 1: the token)
    for k in range(2, order + 1):
        p = np.nonzero(pos >= k - 1)[0]
        if len(p) == 0:
            empty = np.zeros(0, np.int64)
            tables.append({"word": empty, "prefix": empty, "suffix": empty, "count": empty,
                               "bos_start": np.zeros(0, bool)})
            ending = np.full(len(tokens), -1, np.int64)
            continue
        keys = ending[p - 1] * V + tokens[p]
        uniq, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
        suffix = np.empty(len(uniq), np.int64)
        suffix[inv] = ending[p]
        prefix = uniq // V
        tables.append(
            {"word": uniq % V, "prefix": prefix, "suffix": suffix, "count": cnt.astype(np.int64),
                 "bos_start": tables[-1]["bos_start"][prefix]}
        )
        nxt = np.full(len(tokens), -1, np.int64)
        nxt[p] = inv
        ending = nxt
    return tables


def adjusted_counts(tables: list[dict]) -> list[np.ndarray]:
    """Kneser–Ney adjusted counts a(.) for every order (see module docstring)."""
    order = len(tables)
    result = []
    for k in range(1, order + 1):
        t = tables[k - 1]
        if k == order:
            a = t["count"].copy()
        else:
            cont = np.bincount(tables[k]["suffix"], minlength=len(t["word"])).astype(np.int64)
            a = np.where(t["bos_start"], t["count"], cont)
        if k == 1:
            a[BOS] = 0
            a[PAD] = 0
        result.append(a)
    return result


def unigram_probs(adjusted: np.ndarray, discounts: np.ndarray, vocab_size: int) -> np.ndarray:
    """p(w) = u(w) + gamma() / |V| over one (empty) context, |V| = vocabulary without <pad> and
    <s>; p(<s>) = 1 (log 0, as lmplz writes it), p(<pad>) = 0. ``discounts``: (0, D1, D2, D3+)."""
    a = adjusted.astype(np.float64)
    d = discounts[np.minimum(adjusted, 3)]
    denom = a.sum()
    if denom <= 0:
        raise UserError("empty corpus: no word to estimate from")
    probs = (a - d) / denom + d.sum() / denom / (vocab_size - 2)
    probs[BOS] = 1.0
    probs[PAD] = 0.0
    return probs


def prune_thresholds(prune: list[int] | None, order: int) -> list[int]:
    if not prune:
        return [0] * order
    if any(p < 0 for p in prune):
        raise UserError(f"--prune thresholds must be >= 0, got {prune}")
    if len(prune) > order:  # as lmplz: the extra values would be silently dropped
        raise UserError(f"--prune gives {len(prune)} thresholds for a {order}-gram model "
                        f"(at most one per order)")
    if prune[0] != 0:
        raise UserError(f"unigrams cannot be pruned: the first --prune value must be 0, got {prune}")
    if any(b < a for a, b in itertools.pairwise(prune)):
        raise UserError(f"--prune thresholds must be non-decreasing, got {prune}")
    return (list(prune) + [prune[-1]] * order)[:order]


def kneser_ney(
    tokens: np.ndarray,
    vocab_size: int,
    order: int = 5,
    prune: list[int] | None = None,
    discount_fallback: tuple[float, float, float] | None = FALLBACK_DISCOUNTS,
) -> tuple[list[OrderTable], dict]:
    """Estimate an interpolated modified-KN model from a flat ``<s> ... </s>`` token array.

    Returns the per-order tables (log10 probabilities and backoffs) and an info dict (discounts,
    which orders fell back, counts per order).
    """
    if order < 1:
        raise UserError(f"the n-gram order must be >= 1, got {order}")
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    if len(tokens) == 0:
        raise UserError("empty corpus: nothing to estimate an n-gram model from")
    thresholds = prune_thresholds(prune, order)
    raw = count_orders(tokens, vocab_size, order)
    adj = adjusted_counts(raw)

    discounts, fell_back = [], []
    for k in range(1, order + 1):
        d, fb = compute_discounts(adj[k - 1], discount_fallback, k)
        discounts.append(d)
        fell_back.append(fb)

    probs = [unigram_probs(adj[0], discounts[0], vocab_size)]
    gammas = []  # gammas[k-1]: backoff of each order-k entry as a context of order k+1
    keeps = [np.ones(vocab_size, bool)]
    for k in range(2, order + 1):
        t, a = raw[k - 1], adj[k - 1]
        n_ctx = len(raw[k - 2]["word"])
        d = discounts[k - 1][np.minimum(a, 3)]
        keep = t["count"] > thresholds[k - 1]
        af = a.astype(np.float64)
        denom = np.bincount(t["prefix"], weights=af, minlength=n_ctx)
        num = np.bincount(t["prefix"], weights=np.where(keep, d, af), minlength=n_ctx)
        is_ctx = denom > 0
        gamma = np.where(is_ctx, num / np.where(is_ctx, denom, 1.0), 1.0)
        gammas.append(gamma)
        u = (af - d) / denom[t["prefix"]]
        probs.append(u + gamma[t["prefix"]] * probs[-1][t["suffix"]])
        keeps.append(keep)
    gammas.append(np.ones(len(raw[-1]["word"])))

    tables = _finish(raw, probs, gammas, keeps)
    info = {
        "order": order,
        "discounts": [[float(x) for x in d[1:]] for d in discounts],
        "discount_fallback": [k + 1 for k, fb in enumerate(fell_back) if fb],
        "prune": thresholds,
        "counts": [len(t.word) for t in tables],
        "tokens": int(np.count_nonzero(tokens != BOS) - np.count_nonzero(tokens == EOS)),
        "sentences": int(np.count_nonzero(tokens == BOS)),
    }
    return tables, info


def _finish(raw, probs, gammas, keeps) -> list[OrderTable]:
    """Drop pruned entries, renumber prefixes, convert to log10 float32."""
    tables = []
    remap = None
    with np.errstate(divide="ignore"):
        for k, (t, p, g, keep) in enumerate(zip(raw, probs, gammas, keeps), start=1):
            prefix = t["prefix"][keep]
            if remap is not None:
                prefix = remap[prefix]
            # lmplz clamps at 0 for numerical noise (log p <= 0 always).
            logp = np.minimum(0.0, np.log10(p[keep])).astype(np.float32)
            logb = np.log10(g[keep]).astype(np.float32) if k < len(raw) else np.zeros(
                int(keep.sum()), np.float32)
            tables.append(OrderTable(t["word"][keep].astype(np.int64), prefix.astype(np.int64),
                                     logp, logb))
            remap = np.cumsum(keep) - 1
    return tables
