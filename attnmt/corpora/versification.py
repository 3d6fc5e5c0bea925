"""Verse alignment of two Bibles that share verse keys but not always verse contents.

The Reina-Valera 1909 SWORD module uses KJV keys, but in a dozen books it stores the
Spanish/Hebrew versification in them: a chapter starts one verse later or earlier (Num 13,
Hos 12, Jonah 2 ...), a slot is left empty, or a chapter's surplus verses are crammed into its
last verse (Spanish Job 39:30 = KJV Job 39:27-40:5). Pairing by key alone then pairs wrong
verses for whole chapters.

Both modules tag words with Strong's numbers, which do not depend on the language, so the
content overlap of two verse groups is measured by the Dice coefficient of their number sets

    dice(A, B) = 2 |S(A) ∩ S(B)| / (|S(A)| + |S(B)|)

Verses whose same-key pair looks wrong (an empty side or dice < ``suspect_below``) are grouped
into stretches (within a book), widened by ``pad`` verses, and each stretch is re-aligned by a
monotone dynamic programme over "beads" (a English verses <-> b Spanish verses):

    best(i, j) = max over beads (a, b) of best(i - a, j - b) + gain(a, b)
    gain(a, b) = dice(E[i-a:i], S[j-b:j]) - merge_cost * (a + b - 2) + same_key_bonus * [1:1, same key]
    gain(1, 0) = gain(0, 1) = -skip_cost

Everything outside the stretches stays paired by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnmt.corpora.sword import book_of


@dataclass(frozen=True)
class Verse:
    key: str
    text: str
    strongs: frozenset[str]


@dataclass(frozen=True)
class Segment:
    """``src`` English keys aligned with ``tgt`` Spanish keys (either may be empty: unpaired)."""

    src: tuple[str, ...]
    tgt: tuple[str, ...]
    dice: float

    @property
    def same_key(self) -> bool:
        return self.src == self.tgt


def dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a and b else 0.0


def _union(verses: Sequence[Verse]) -> frozenset[str]:
    return frozenset().union(*(v.strongs for v in verses))


# Bead shapes: 1:1, skips, k:1 / 1:k merges (overflow verses) and small crossings.
BEADS: tuple[tuple[int, int], ...] = (
    ((1, 1), (1, 0), (0, 1), (2, 2), (2, 3), (3, 2))
    + tuple((k, 1) for k in range(2, 13))
    + tuple((1, k) for k in range(2, 13))
)


@dataclass(frozen=True)
class AlignConfig:
    suspect_below: float = 0.3  # same-key dice under this marks a verse as suspect
    join_gap: int = 40  # suspects this close (same book) belong to one stretch
    pad: int = 8  # verses added on each side of a stretch
    band: int = 15  # DP search band around the stretch's diagonal
    skip_cost: float = 0.05
    merge_cost: float = 0.005
    same_key_bonus: float = 0.01


def align_stretch(
    src: Sequence[Verse], tgt: Sequence[Verse], cfg: AlignConfig = AlignConfig()
) -> list[Segment]:
    """Monotone bead alignment of two verse sequences maximising summed Strong's dice."""
    n, m = len(src), len(tgt)
    # best[(i, j)] = (score, bead) of the best alignment of src[:i] with tgt[:j]
    best: dict[tuple[int, int], tuple[float, tuple[int, int]]] = {(0, 0): (0.0, (0, 0))}
    for i in range(n + 1):
        centre = round(i * m / n) if n else 0
        for j in range(max(0, centre - cfg.band), min(m, centre + cfg.band) + 1):
            if i == j == 0:
                continue
            top: tuple[float, tuple[int, int]] | None = None
            for a, b in BEADS:
                prev = best.get((i - a, j - b))
                if prev is None:
                    continue
                if a and b:
                    gain = dice(_union(src[i - a : i]), _union(tgt[j - b : j]))
                    gain -= cfg.merge_cost * (a + b - 2)
                    if a == b == 1 and src[i - 1].key == tgt[j - 1].key:
                        gain += cfg.same_key_bonus
                else:
                    gain = -cfg.skip_cost
                if top is None or prev[0] + gain > top[0]:
                    top = (prev[0] + gain, (a, b))
            if top is not None:
                best[(i, j)] = top
    if (n, m) not in best:  # cannot happen with (1, 0)/(0, 1) beads and band >= 1
        raise RuntimeError("alignment band too narrow")
    out: list[Segment] = []
    i, j = n, m
    while (i, j) != (0, 0):
        a, b = best[(i, j)][1]
        s, t = src[i - a : i], tgt[j - b : j]
        score = dice(_union(s), _union(t)) if s and t else 0.0
        out.append(Segment(tuple(v.key for v in s), tuple(v.key for v in t), score))
        i, j = i - a, j - b
    return out[::-1]


def suspect_stretches(
    keys: Sequence[str],
    src: dict[str, Verse],
    tgt: dict[str, Verse],
    cfg: AlignConfig = AlignConfig(),
) -> list[tuple[int, int]]:
    """Index ranges ``[start, end]`` (inclusive, within one book) of ``keys`` to re-align."""
    bad = [
        i
        for i, k in enumerate(keys)
        if not src[k].text
        or not tgt[k].text
        or dice(src[k].strongs, tgt[k].strongs) < cfg.suspect_below
    ]
    groups: list[list[int]] = []
    for i in bad:
        if groups and i - groups[-1][1] <= cfg.join_gap and (
            book_of(keys[i]) == book_of(keys[groups[-1][1]])
        ):
            groups[-1][1] = i
        else:
            groups.append([i, i])
    out: list[tuple[int, int]] = []
    for first, last in groups:
        s, e = max(0, first - cfg.pad), min(len(keys) - 1, last + cfg.pad)
        while book_of(keys[s]) != book_of(keys[first]):
            s += 1
        while book_of(keys[e]) != book_of(keys[last]):
            e -= 1
        if out and s <= out[-1][1] + 1 and book_of(keys[s]) == book_of(keys[out[-1][1]]):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def align_bibles(
    keys: Sequence[str],
    src: dict[str, Verse],
    tgt: dict[str, Verse],
    cfg: AlignConfig = AlignConfig(),
) -> list[Segment]:
    """Segments covering every key of ``keys`` (canonical order; both dicts hold all keys,
    possibly with empty text): same-key 1:1 pairs, except in suspect stretches, where the
    non-empty verses are re-aligned by :func:`align_stretch`."""
    out: list[Segment] = []
    pos = 0
    for s, e in suspect_stretches(keys, src, tgt, cfg):
        out += [_same(k, src, tgt) for k in keys[pos:s]]
        a = [src[k] for k in keys[s : e + 1] if src[k].text]
        b = [tgt[k] for k in keys[s : e + 1] if tgt[k].text]
        out += align_stretch(a, b, cfg)
        pos = e + 1
    out += [_same(k, src, tgt) for k in keys[pos:]]
    return out


def _same(k: str, src: dict[str, Verse], tgt: dict[str, Verse]) -> Segment:
    return Segment((k,), (k,), dice(src[k].strongs, tgt[k].strongs))


def keep_segment(seg: Segment, min_dice: float = 0.2) -> bool:
    """A segment becomes a training pair if both sides exist and either its keys agree (low
    dice there means sparse tagging, not a wrong pair) or its content overlap is clear."""
    return bool(seg.src and seg.tgt) and (seg.same_key or seg.dice >= min_dice)
