"""ARPA lines as bytes, built with numpy: no Python string per n-gram.

Writing an ARPA file is mostly text work: two numbers and up to n words per line, tens of millions
of lines for a 5-gram on 10 M tokens. Here a block of lines is assembled in a few array passes:

* numbers: ``format_g9`` renders float32 values exactly as C's ``"%.9g"`` (what the ARPA writer
  always printed; 9 significant digits round-trip a float32). A value's text is determined by its
  9 decimal digits, its sign, its decimal exponent and how many digits are significant, so each
  (sign, exponent, significant digits) class has a fixed template of 16 characters, each either
  "digit j" or a constant, and formatting is one gather per value;
* words: the vocabulary is one UTF-8 buffer of ``word + separator`` for the three separators an
  ARPA line uses after a word (space, tab, newline);
* each line is a few segments (number + tab, word + space, ..., word + tab, number + newline),
  and the output is one gather from the buffer: the source index of every output byte is a
  cumulative sum of ones with a jump at each segment start.
"""

from __future__ import annotations

import numpy as np

WIDTH = 16  # longest "%.9g" of a float32 ("-1.23456789e-05", 15 bytes) and a separator
_CONSTS = b"-.e+0123456789\x00"  # constant characters of the templates, after the 9 digits
_E_MIN, _E_MAX = -46, 39  # decimal exponents of nonzero finite float32 values


def _template(neg: bool, e: int, sig: int) -> tuple[list[int], int]:
    """Columns of "%.9g" for a value with digits d0..d8, sign, decimal exponent e and sig
    significant digits: an index < 9 is digit j, else _CONSTS[index - 9]."""
    toks: list[int | bytes] = [b"-"] if neg else []
    if -4 <= e <= 8:  # fixed notation, trailing zeros (and a trailing point) dropped
        if e >= 0:
            toks += list(range(e + 1))
            if sig > e + 1:
                toks += [b"."] + list(range(e + 1, sig))
        else:
            toks += [b"0", b"."] + [b"0"] * (-e - 1) + list(range(sig))
    else:  # exponent notation, at least two exponent digits
        toks.append(0)
        if sig > 1:
            toks += [b"."] + list(range(1, sig))
        toks += [b"e", b"-" if e < 0 else b"+"] + [bytes([c]) for c in f"{abs(e):02d}".encode()]
    index = [t if isinstance(t, int) else 9 + _CONSTS.index(t) for t in toks]
    return index + [9 + _CONSTS.index(b"\x00")] * (WIDTH - len(index)), len(index)


def _templates() -> tuple[np.ndarray, list, np.ndarray]:
    """Per class (sign, exponent, significant digits): the template's constant characters (0 where
    a digit goes), its runs of consecutive digits (output column, digit, count) and its length."""
    consts, runs, lengths = [], [], []
    for neg in (False, True):
        for e in range(_E_MIN, _E_MAX + 1):
            for sig in range(1, 10):
                cols, n = _template(neg, e, sig)
                consts.append([0 if c < 9 else _CONSTS[c - 9] for c in cols])
                r: list[list[int]] = []
                for p, c in enumerate(cols):
                    if c >= 9:
                        continue
                    if r and r[-1][0] + r[-1][2] == p and r[-1][1] + r[-1][2] == c:
                        r[-1][2] += 1
                    else:
                        r.append([p, c, 1])
                runs.append(r)
                lengths.append(n)
    return np.array(consts, np.uint8), runs, np.array(lengths, np.int64)


_CONST_ROWS, _RUNS, _LENGTHS = _templates()
_EXACT_POW10 = np.array([float(10**i) for i in range(23)])  # exactly representable


def format_g9(x: np.ndarray, sep: int | None = None, out: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``"%.9g" % v`` for every float32 v of x, as (matrix, lengths, rows): the text of x[i] is
    ``matrix[rows[i], :lengths[i]]`` (the matrix is (N, WIDTH) uint8, ``out`` if given, with the
    numbers grouped by format); with ``sep``, that byte follows each number (counted in its length).

    The 9 digits of v are round(y), y = |v| * 10^(8-e) with e = floor(log10 |v|): one rounding
    (10^(8-e) is exact for 0 <= 8-e <= 22), so y is within 1.2e-7 of the exact decimal value and
    round(y) is exact unless y is within 1e-6 of a half. Those few values, the ones whose log10 or
    rounding lands next to a power of ten, values outside 1e-14..1e8 and inf/nan are formatted
    by Python, so the output is always exactly C's (glibc's printf).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    N = len(x)
    if out is None:
        out = np.empty((N, WIDTH), np.uint8)
    if N == 0:
        return out, np.zeros(0, np.int64), np.zeros(0, np.int64)
    with np.errstate(all="ignore"):  # log10(0), inf and nan: all sent to the slow path
        a = np.abs(x.astype(np.float64))
        e = np.floor(np.log10(a))
        q = 8.0 - e
        fast = (q >= 0) & (q <= 22)  # false for 0, inf and nan
        y = a * _EXACT_POW10[np.where(fast, q, 0).astype(np.intp)]
        floor_y = np.floor(y)
        frac = y - floor_y
        n = np.where(fast, floor_y + (frac >= 0.5), 0).astype(np.int64)
    fast &= (n >= 100_000_000) & (n < 1_000_000_000) & (np.abs(frac - 0.5) > 1e-6)
    slow = ~fast & (a != 0)
    n = np.where(fast, n, 0).astype(np.int32)  # zeros: 000000000, exponent 0, 1 digit: "0"
    e = np.where(fast, e, 0).astype(np.int64)
    # One template per (sign, exponent) in fixed notation (the text of fewer significant digits
    # is a prefix of the 9-digit one); exponent notation needs one per digit count too.
    row = (np.signbit(x) * (_E_MAX - _E_MIN + 1) + (e - _E_MIN)) * 9
    cls = row + 8
    expo = np.flatnonzero((e < -4) | (e > 8))
    if len(expo):
        cls[expo] = row[expo] + _digits(n[expo])[1] - 1
    order = np.argsort(cls.astype(np.int16), kind="stable")  # groups of a template (radix sort)
    cls = cls[order]
    digits, sig = _digits(n[order])
    lengths = _LENGTHS[row[order] + sig - 1]
    bounds = [0, *(np.flatnonzero(cls[1:] != cls[:-1]) + 1).tolist(), N]
    for a_, b_ in zip(bounds[:-1], bounds[1:]):
        c = int(cls[a_])
        out[a_:b_] = _CONST_ROWS[c]
        for at, first, count in _RUNS[c]:
            out[a_:b_, at : at + count] = digits[a_:b_, first : first + count]
    rows = np.empty(N, np.int64)
    rows[order] = np.arange(N)
    for i in np.nonzero(slow)[0].tolist():
        text = ("%.9g" % float(x[i])).encode()
        out[rows[i], : len(text)] = np.frombuffer(text, np.uint8)
        lengths[rows[i]] = len(text)
    if sep is not None:
        out[np.arange(N), lengths] = sep
        lengths += 1
    return out, lengths[rows], rows


def _digits(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal digit characters (N, 9) of 9-digit numbers (0 allowed) and how many are
    significant (without trailing zeros; 1 for 0)."""
    digits = np.empty((len(n), 9), np.uint8)
    trailing = np.zeros(len(n), np.int64)
    alive = np.ones(len(n), bool)
    for j in range(8, -1, -1):
        rest = n // 10
        d = n - rest * 10
        digits[:, j] = d
        n = rest
        if j:
            alive &= d == 0
            trailing += alive
    digits += 48
    return digits, 9 - trailing


SPACE, TAB, NEWLINE = 32, 9, 10


class LineWriter:
    """Assembles ARPA lines ``logp<TAB>w1 w2 .. wk[<TAB>logb]<NEWLINE>`` for blocks of at most
    ``block`` n-grams over one vocabulary."""

    def __init__(self, words: list[str], block: int):
        encoded = [w.encode("utf-8") for w in words]
        self.word_len = np.array([len(w) + 1 for w in encoded], np.int64)  # with the separator
        self.word_start = np.cumsum(self.word_len) - self.word_len
        size = int(self.word_len.sum())
        text = b"".join(b"".join(w + sep for w in encoded) for sep in (b" ", b"\t", b"\n"))
        self.variant = {SPACE: 0, TAB: size, NEWLINE: 2 * size}  # where each copy starts
        self.block = block
        self.numbers = 3 * size  # two (block, WIDTH) number matrices follow the words
        self.buffer = np.empty(self.numbers + 2 * block * WIDTH, np.uint8)
        self.buffer[: self.numbers] = np.frombuffer(text, np.uint8)
        self._scratch = {}

    def lines(self, words: np.ndarray, logp: np.ndarray, logb: np.ndarray | None) -> np.ndarray:
        """The bytes (uint8, valid until the next call) of the lines of a block of n-grams.

        words: int (N, k) vocabulary ids, N <= block; logb None for the highest order."""
        N, k = words.shape
        numbers = []
        for m, (values, sep) in enumerate(((logp, TAB), (logb, NEWLINE))):
            if values is None:
                continue
            at = self.numbers + m * self.block * WIDTH
            region = self.buffer[at : at + N * WIDTH].reshape(N, WIDTH)
            _, n, rows = format_g9(values, sep, out=region)
            numbers.append((at + rows * WIDTH, n))
        segments = [numbers[0]]
        for j in range(k):
            sep = SPACE if j < k - 1 else (TAB if logb is not None else NEWLINE)
            w = words[:, j]
            segments.append((self.variant[sep] + self.word_start[w], self.word_len[w]))
        segments += numbers[1:]
        seg_starts = np.stack([s for s, _ in segments], 1).reshape(-1)
        seg_lengths = np.stack([n for _, n in segments], 1).reshape(-1)
        return gather_segments(self.buffer, seg_starts, seg_lengths, self._scratch)



def gather_segments(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                    scratch: dict | None = None) -> np.ndarray:
    """Concatenation of source[starts[i] : starts[i] + lengths[i]] over i, in one gather.
    ``scratch``: a dict in which buffers are kept from call to call (no fresh pages each time)."""
    keep = lengths > 0
    if not keep.all():
        starts, lengths = starts[keep], lengths[keep]
    if len(starts) == 0:
        return np.zeros(0, np.uint8)
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    scratch = {} if scratch is None else scratch
    if len(scratch.get("step", ())) < total:
        scratch["step"] = np.empty(total, np.int64)
        scratch["out"] = np.empty(total, np.uint8)
    step, out = scratch["step"][:total], scratch["out"][:total]
    step.fill(1)
    # at each segment start, jump from the previous segment's last byte to this segment's first
    step[0] = starts[0]
    step[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    np.cumsum(step, out=step)
    return np.take(source, step, out=out)
