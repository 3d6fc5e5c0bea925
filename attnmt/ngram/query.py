"""Vectorised backoff queries over the sorted n-gram tables, in torch (CPU or GPU).

Layout (per order k, built once from :class:`attnmt.ngram.estimate.OrderTable`):

    keys[k]    int64 [n_k]      prefix * V + word, strictly increasing (sorted by context, then word)
    word[k]    int32/64 [n_k]   the table's own array (no copy)
    logp[k]    float32 [n_k]    natural-log p(word | prefix)
    logb[k]    float32 [n_k]    natural-log backoff of the entry used as a context

so a loaded model costs 16 bytes per n-gram on top of its tables. The entries with prefix i (a
CSR row) are keys[k] in [i * V, (i + 1) * V): two binary searches per context and order.

Order 1 is dense over the vocabulary (the entry of word w is w). Finding the j-gram that ends at a
position is one ``torch.searchsorted`` per order: ending_j[t] = find_j(ending_{j-1}[t-1], x[t]).
``<s>`` never occurs as a non-initial word of any n-gram (and <pad> never at all), so the chain
stops by itself at the last ``<s>``: the history before it is ignored, as KenLM does.

The ARPA backoff rule p(w | h) = P(h w) if (h w) is stored, else b(h) p(w | h') gives, for the
whole vocabulary at once, with contexts s_j = the last j words and c_j = sum_{i >= j} log b(s_i):

    log p(w | h) = log P(s_j w) + c_{j+1},   j = the longest stored context with (s_j w) stored

so one dense pass ``logp_1[None, :] + c_1[:, None]`` and, for j = 1..n-1 in increasing order, a
scatter of each found context's CSR row (``logp + c_{j+1}``) give the full distribution. The
unigram-context rows are the long ones (a frequent word has thousands of successors), so when
contexts share their last word, level 1 is built once per distinct last word and gathered.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnmt.data.vocab import BOS, PAD, UNK

LN10 = math.log(10.0)
NEG = -1.0e4  # natural-log score of ids that can never be predicted (<pad>, <s>); finite on purpose


def _natural(log10: np.ndarray, block: int = 1 << 20) -> torch.Tensor:
    """float32 natural logs of float32 log10 values, converted through float64 in blocks (no
    float64 copy of a whole table while loading a large model)."""
    out = torch.empty(len(log10), dtype=torch.float32)
    for s in range(0, len(log10), block):
        out[s : s + block] = torch.from_numpy(log10[s : s + block].astype(np.float64) * LN10)
    return out


class QueryIndex:
    """Torch tensors for batched lookups; see the module docstring for the layout."""

    def __init__(self, tables, vocab_size: int, device: str | torch.device = "cpu"):
        self.V = vocab_size
        self.order = len(tables)
        self.keys, self.word, self.logp, self.logb = [], [], [], []
        for k, t in enumerate(tables, start=1):
            word = torch.from_numpy(t.word)
            keys = torch.from_numpy(t.prefix).to(torch.long).mul(vocab_size).add_(word)
            logp = _natural(t.logp)
            if k == 1:
                # Never predicted: replaced by NEG after the fill; 0 here keeps the sums finite.
                logp[PAD] = 0.0
                logp[BOS] = 0.0
            self.keys.append(keys)
            self.word.append(word)
            self.logp.append(logp)
            self.logb.append(_natural(t.logb))
        self.to(device)

    def to(self, device: str | torch.device) -> QueryIndex:
        self.device = torch.device(device)
        for name in ("keys", "word", "logp", "logb"):
            setattr(self, name, [x.to(self.device) for x in getattr(self, name)])
        return self

    # -- lookups ---------------------------------------------------------------------------------

    def find(self, k: int, prefix: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
        """Index of n-gram (prefix entry of order k-1, word) in order k, or -1."""
        if k == 1:
            return word.clone()
        keys = self.keys[k - 1]
        if len(keys) == 0:
            return torch.full_like(word, -1)
        q = prefix * self.V + word
        i = torch.searchsorted(keys, q).clamp_(max=len(keys) - 1)
        hit = (keys[i] == q) & (prefix >= 0)
        return torch.where(hit, i, torch.full_like(i, -1))

    def endings(self, tokens: torch.Tensor, max_len: int) -> list[torch.Tensor]:
        """ends[j-1][..., t]: index of the j-gram ending at t (order j), -1 if not stored; j <= max_len.

        tokens: LongTensor [..., T] of ids in [0, V).
        """
        ends = [tokens]
        for j in range(2, max_len + 1):
            prev = torch.full_like(tokens, -1)
            prev[..., 1:] = ends[-1][..., :-1]
            ends.append(self.find(j, prev, tokens))
        return ends

    def clean(self, tokens: torch.Tensor) -> torch.Tensor:
        """Ids outside the vocabulary are <unk>."""
        tokens = tokens.to(self.device, torch.long)
        bad = (tokens < 0) | (tokens >= self.V)
        return torch.where(bad, torch.full_like(tokens, UNK), tokens)

    # -- full distributions ------------------------------------------------------------------------

    def _scatter(self, out: torch.Tensor, rows: torch.Tensor, entries: torch.Tensor, j: int,
                 add: torch.Tensor | None) -> None:
        """out[rows[i], w] = logp(w | entries[i]) (+ add[i]) for every stored extension w of the
        order-j entry entries[i] (rows with entry -1 are skipped). out: [R, V], rows/add: [P].
        """
        ok = entries >= 0
        if not bool(ok.all()):
            rows, entries = rows[ok], entries[ok]
            add = add[ok] if add is not None else None
        start = torch.searchsorted(self.keys[j], entries * self.V)
        length = torch.searchsorted(self.keys[j], (entries + 1) * self.V) - start
        total = int(length.sum())
        if total == 0:
            return
        # Entry of each scattered value: start of its row's CSR range + rank inside the range.
        row_of = torch.repeat_interleave(torch.arange(len(rows), device=self.device), length,
                                         output_size=total)
        delta = start - (torch.cumsum(length, 0) - length)
        ent = torch.arange(total, device=self.device) + delta[row_of]
        vals = self.logp[j][ent]
        if add is not None:
            vals = vals + add[row_of]
        out.view(-1)[(rows * self.V)[row_of] + self.word[j][ent]] = vals

    def fill(self, ctx: list[torch.Tensor]) -> torch.Tensor:
        """Full natural-log distributions for P contexts.

        ctx[j-1]: LongTensor [P], the order-j entry of the last j context words (-1 if absent),
        for j = 1..order-1. Returns FloatTensor [P, V].
        """
        n = self.order
        if n == 1:
            out = self.logp[0].unsqueeze(0).clone()
        else:
            P = ctx[0].shape[0]
            zero = torch.zeros((), device=self.device)
            logb = [torch.where(c >= 0, self.logb[j][c.clamp(min=0)], zero)
                    for j, c in enumerate(ctx)]
            # c[j] = sum_{i >= j} log b(s_i), j = 1..n-1; c[n] = 0.
            c = [torch.zeros(P, device=self.device) for _ in range(n + 1)]
            for j in range(n - 1, 0, -1):
                c[j] = c[j + 1] + logb[j - 1]
            rows = torch.arange(P, device=self.device)
            last, inv = torch.unique(ctx[0], return_inverse=True)
            if 2 * len(last) > P:
                out = self.logp[0].unsqueeze(0) + c[1].unsqueeze(1)  # [P, V]
                self._scatter(out, rows, ctx[0], 1, c[2])
            else:
                # Level 1 on the distinct last words only: their bigram rows are the long ones
                # (a frequent word is followed by thousands of words), and contexts share them.
                lb1 = torch.where(last >= 0, self.logb[0][last.clamp(min=0)], zero)
                dist1 = self.logp[0].unsqueeze(0) + lb1.unsqueeze(1)  # [U, V]
                self._scatter(dist1, torch.arange(len(last), device=self.device), last, 1, None)
                out = dist1.index_select(0, inv)  # [P, V]
                out.add_(c[2].unsqueeze(1))
            for j in range(2, n):
                self._scatter(out, rows, ctx[j - 1], j, c[j + 1])
        out[:, PAD] = NEG
        out[:, BOS] = NEG
        return out

    def context_entries(self, contexts: torch.Tensor) -> list[torch.Tensor]:
        """For contexts [B, m], the order-j entries of their last j words, j = 1..order-1."""
        m = contexts.shape[1]
        if self.order == 1:
            return []
        if m == 0:
            return [torch.full((contexts.shape[0],), -1, dtype=torch.long, device=self.device)
                    for _ in range(self.order - 1)]
        ends = self.endings(contexts, min(m, self.order - 1))
        ctx = [e[:, -1] for e in ends]
        while len(ctx) < self.order - 1:
            ctx.append(torch.full_like(ctx[0], -1))
        return ctx

    # -- scoring observed words ---------------------------------------------------------------------

    def score_positions(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For a flat LongTensor of ``<s> w1 .. </s>`` sentences, natural-log p of every token given
        its history (0 at each ``<s>``, which is not predicted) and the order of the n-gram used.
        """
        n = self.order
        L = tokens.shape[0]
        ends = self.endings(tokens, n - 1) if n > 1 else []
        hist = []  # hist[j-1][t]: order-j entry of the j words before t
        for e in ends:
            h = torch.full_like(e, -1)
            h[1:] = e[:-1]
            hist.append(h)
        best = self.logp[0][tokens].clone()
        used = torch.ones(L, dtype=torch.long, device=self.device)
        backoff = torch.zeros(L, device=self.device)
        # Walk from the longest context down; b(s_j) is paid whenever (s_j w) is missing.
        found = torch.zeros(L, dtype=torch.bool, device=self.device)
        total_b = torch.zeros(L, device=self.device)
        for j in range(n - 1, 0, -1):
            h = hist[j - 1]
            e = self.find(j + 1, h, tokens)
            hit = (e >= 0) & ~found
            best = torch.where(hit, self.logp[j][e.clamp(min=0)], best)
            used = torch.where(hit, torch.full_like(used, j + 1), used)
            backoff = torch.where(hit, total_b, backoff)
            found |= hit
            lb = torch.where(h >= 0, self.logb[j - 1][h.clamp(min=0)], torch.zeros_like(total_b))
            total_b = total_b + lb
        backoff = torch.where(found, backoff, total_b)
        score = best + backoff
        is_bos = tokens == BOS
        return torch.where(is_bos, torch.zeros_like(score), score), used
