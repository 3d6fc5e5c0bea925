"""``NgramLM``: a back-off n-gram LM (interpolated modified Kneser–Ney) with batched torch queries.

The API NgramRes (Li et al. 2022) builds on — every score here is a **natural log**, float32:

    lm = load_ngram("tgt.5gram.arpa")          # or .ngram (our binary); lm.to("cuda")
    lm.next_token_logprobs(contexts)           # LongTensor [B, m] -> FloatTensor [B, V]
    lm.sequence_logprobs(tokens)               # LongTensor [B, T] -> FloatTensor [B, T, V]
    lm.sequence_logprobs(tokens, topk=64)      # -> (values [B, T, k], indices [B, T, k])

* Ids are the neural vocabulary's (attnmt.data.vocab): <pad>=0, <unk>=1, <s>=2, </s>=3, then
  words; V = ``lm.vocab_size`` = len(tokenizer) when the model was built with ``--vocab-from``.
* ``contexts[:, -1]`` is the most recent token; only the last n-1 columns matter. A history shorter
  than n-1 tokens is **left-padded with BOS** (<s>): everything up to and including the last <s>
  is treated as the sentence start, exactly like KenLM's begin-of-sentence state. (Any token that
  never occurs inside an n-gram — <pad> — also cuts the history, but without the <s> context.)
* ``sequence_logprobs``: position t uses the history tokens[:, :t+1] to predict token t+1, so for
  decoder inputs [BOS, y1, .., y_{T-1}] row t is the n-gram distribution over y_{t+1}: exactly
  teacher forcing. Positions after the end of a sentence (PAD) produce values to be masked.
* Row t sums to 1 over every id except <pad> and <s>, which can never be predicted and get
  log-prob ``NEG = -1e4`` (finite, so ``alpha * logp`` stays finite when alpha = 0). </s> is
  predicted. Vocabulary ids absent from the training text have count 0 and get the uniform
  unigram share times the backoffs — what KenLM gives <unk> — so nothing is counted twice.
* Ids outside [0, V) are read as <unk>.

Sentence-level scores (``score_sentence``, ``full_scores``, ``perplexity``) follow KenLM: log10,
``<s>`` as context, ``</s>`` scored, words missing from the vocabulary scored as <unk> (OOV).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence, Sized
from pathlib import Path

import numpy as np
import torch

from attnmt.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from attnmt.errors import UserError
from attnmt.files import open_regular
from attnmt.ngram.arpa import read_arpa, write_arpa
from attnmt.ngram.binary import read_binary, write_binary
from attnmt.ngram.corpus import flatten, read_text_corpus, split_words
from attnmt.ngram.estimate import FALLBACK_DISCOUNTS, OrderTable, kneser_ney
from attnmt.ngram.query import LN10, NEG, QueryIndex
from attnmt.ngram.tables import MemoryTables
from attnmt.progress import progress

__all__ = ["NEG", "NgramLM", "load_ngram"]


class NgramLM:
    """Back-off n-gram model over integer ids; tables as in :mod:`attnmt.ngram.estimate`."""

    def __init__(self, vocab: list[str], tables: list[OrderTable], info: dict | None = None):
        if len(tables[0].word) != len(vocab):
            raise ValueError("the unigram table must be dense over the vocabulary")
        self.vocab = vocab
        self.tables = tables
        self.info = dict(info or {})
        self.index = {w: i for i, w in enumerate(vocab) if i != PAD}
        self._query: QueryIndex | None = None
        self._device = torch.device("cpu")

    @property
    def order(self) -> int:
        return len(self.tables)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        counts = ", ".join(str(len(t.word)) for t in self.tables)
        return f"NgramLM(order={self.order}, vocab={self.vocab_size}, ngrams=[{counts}])"

    # -- building ------------------------------------------------------------------------------------

    @classmethod
    def estimate(
        cls,
        sentences: Iterable[Sequence[int]] | np.ndarray,
        vocab: list[str] | int,
        order: int = 5,
        prune: list[int] | None = None,
        discount_fallback: tuple[float, float, float] | None = FALLBACK_DISCOUNTS,
    ) -> NgramLM:
        """Estimate from token-id sentences (without <s>/</s>), or from an already flat int64
        array of ``<s> .. </s>`` sentences. ``vocab``: the id -> string list (or just its size).
        """
        if isinstance(vocab, int):
            vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), vocab)]
        if isinstance(sentences, np.ndarray):
            flat = sentences.astype(np.int64)
        else:
            flat = flatten(sentences)
        V = len(vocab)
        inner = flat[(flat != BOS) & (flat != EOS)]
        if len(inner) and (inner.min() < 0 or inner.max() >= V or np.any(inner == PAD)):
            raise ValueError("token ids must lie in [1, V) and exclude <pad>, <s>, </s>")
        tables, info = kneser_ney(flat, V, order, prune, discount_fallback)
        return cls(list(vocab), tables, info)

    @classmethod
    def estimate_text(cls, path: str | os.PathLike, order: int = 5, tokenizer=None,
                      **kwargs) -> NgramLM:
        """Estimate from a text file: one sentence a line, whitespace words or ``tokenizer``."""
        vocab, flat = read_text_corpus(path, tokenizer)
        return cls.estimate(flat, vocab, order, **kwargs)

    # -- files -----------------------------------------------------------------------------------

    @classmethod
    def from_arpa(cls, path: str | os.PathLike) -> NgramLM:
        vocab, tables = read_arpa(path)
        return cls(vocab, tables, {"order": len(tables), "source": str(path)})

    def to_arpa(self, path: str | os.PathLike) -> None:
        write_arpa(path, self.vocab, self.tables)

    def save(self, path: str | os.PathLike) -> None:
        """Our binary format (:mod:`attnmt.ngram.binary`): safetensors of the sorted arrays."""
        write_binary(path, self.vocab, MemoryTables(self.tables), self.info)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NgramLM:
        vocab, tables, info = read_binary(path)
        _check_tables(vocab, tables, str(path))
        return cls(vocab, tables, info)

    # -- word-level helpers ------------------------------------------------------------------------

    def ids(self, words: Sequence[str]) -> list[int]:
        """Vocabulary ids of words (unknown -> <unk>)."""
        return [self.index.get(w, UNK) for w in words]

    def _sentence_ids(self, sentence: str | Sequence[str] | Sequence[int]) -> list[int]:
        if isinstance(sentence, str):
            sentence = split_words(sentence)
        if sentence and isinstance(sentence[0], str):
            return self.ids(sentence)  # type: ignore[arg-type]
        return [int(i) if 0 <= int(i) < self.vocab_size else UNK for i in sentence]

    def _find(self, words: Sequence[int]) -> int:
        """Table entry of the n-gram ``words`` (any order <= n), -1 if not stored (slow path)."""
        idx = int(words[0])
        if not np.isfinite(self.tables[0].logp[idx]) or idx == PAD:
            return -1
        for j, w in enumerate(words[1:], start=2):
            t = self.tables[j - 1]
            lo = np.searchsorted(t.prefix, idx, "left")
            hi = np.searchsorted(t.prefix, idx, "right")
            pos = lo + np.searchsorted(t.word[lo:hi], w)
            if pos >= hi or t.word[pos] != w:
                return -1
            idx = int(pos)
        return idx

    def logprob(self, context: Sequence[int], word: int) -> float:
        """log10 p(word | context) by the textbook ARPA back-off recursion, one n-gram at a time.

        The reference the vectorised queries are tested against; use them for real work.
        """
        ctx = list(context)
        if BOS in ctx:
            ctx = ctx[len(ctx) - 1 - ctx[::-1].index(BOS):]
        ctx = ctx[max(0, len(ctx) - (self.order - 1)):] if self.order > 1 else []
        backoff = 0.0
        for start in range(len(ctx) + 1):
            h = ctx[start:]
            e = self._find(h + [word])
            if e >= 0:
                return float(self.tables[len(h)].logp[e]) + backoff
            if h:
                eh = self._find(h)
                if eh >= 0:
                    backoff += float(self.tables[len(h) - 1].logb[eh])
        return float(self.tables[0].logp[word]) + backoff

    def full_scores(self, sentence, bos: bool = True, eos: bool = True) -> list[tuple]:
        """Per token (log10 prob, n-gram length used, is OOV), like kenlm.Model.full_scores."""
        ids = self._sentence_ids(sentence)
        words = split_words(sentence) if isinstance(sentence, str) else list(sentence)
        oov = [isinstance(w, str) and w not in self.index for w in words]
        seq = ([BOS] if bos else []) + ids + ([EOS] if eos else [])
        skip = 1 if bos else 0
        if not bos:
            # KenLM's null context: no <s>; a leading <pad> cuts the history the same way.
            seq = [PAD] + seq
            skip = 1
        ln, used = self._index().score_positions(torch.tensor(seq, device=self._device))
        ln, used = ln.cpu().tolist()[skip:], used.cpu().tolist()[skip:]
        flags = oov + ([False] if eos else [])
        return [(x / LN10, u, o) for x, u, o in zip(ln, used, flags)]

    def score_sentence(self, sentence, bos: bool = True, eos: bool = True) -> float:
        """log10 probability of a sentence (KenLM's ``model.score``)."""
        return float(sum(s for s, _, _ in self.full_scores(sentence, bos, eos)))

    def perplexity(self, sentences: Iterable[str | Sequence[str] | Sequence[int]],
                   chunk_tokens: int = 2_000_000) -> dict:
        """Corpus perplexity, KenLM ``query`` style: every word and </s> counted, OOVs included.

        Returns ppl (with </s>), ppl_no_eos (words only), ppl_no_oov (OOV words' scores and counts
        left out), the log10 total, and token / sentence / OOV counts.
        """
        tot = {"logprob": 0.0, "eos_logprob": 0.0, "oov_logprob": 0.0}
        n = {"words": 0, "sentences": 0, "oov": 0}
        batch: list[list[int]] = []
        oov_flags: list[bool] = []
        size = 0

        def flush():
            if not batch:
                return
            flat = torch.from_numpy(flatten(batch)).to(self._device)
            ln, _ = self._index().score_positions(flat)
            lg = ln.double().cpu().numpy() / LN10
            tokens = flat.cpu().numpy()
            is_eos = tokens == EOS
            is_word = (tokens != BOS) & ~is_eos
            oov = np.zeros(len(tokens), bool)
            oov[is_word] = oov_flags
            tot["logprob"] += float(lg[is_word | is_eos].sum())
            tot["eos_logprob"] += float(lg[is_eos].sum())
            tot["oov_logprob"] += float(lg[oov].sum())
            batch.clear()
            oov_flags.clear()

        total_lines = len(sentences) if isinstance(sentences, Sized) else 0
        with progress(total_lines, "ngram", "sentence") as bar:  # a bar only for a command on a terminal
            for s in sentences:
                words = split_words(s) if isinstance(s, str) else list(s)
                ids = self._sentence_ids(words)
                flags = [isinstance(w, str) and w not in self.index for w in words] if words and \
                    isinstance(words[0], str) else [int(i) == UNK for i in ids]
                batch.append(ids)
                oov_flags.extend(flags)
                n["words"] += len(ids)
                n["sentences"] += 1
                n["oov"] += sum(flags)
                size += len(ids) + 2
                if size >= chunk_tokens:
                    flush()
                    bar.set(n["sentences"])
                    size = 0
            flush()
        if n["sentences"] == 0:
            raise UserError("no sentences to score")
        total = n["words"] + n["sentences"]
        no_oov = total - n["oov"]
        return {
            "ppl": 10 ** (-tot["logprob"] / total),
            "ppl_no_eos": 10 ** (-(tot["logprob"] - tot["eos_logprob"]) / max(n["words"], 1)),
            "ppl_no_oov": 10 ** (-(tot["logprob"] - tot["oov_logprob"]) / max(no_oov, 1)),
            "logprob10": tot["logprob"],
            **n,
        }

    def sentence_logprobs(self, sentences: Sequence[str | Sequence[str] | Sequence[int]],
                          chunk_tokens: int = 2_000_000) -> list[float]:
        """Natural-log probability of each sentence, ``<s>`` as context and ``</s>`` scored (OOV
        words as <unk>): ``score_sentence`` × ln 10, batched — one query per ``chunk_tokens``."""
        out: list[float] = []
        start = 0
        with progress(len(sentences), "ngram", "sentence") as bar:
            while start < len(sentences):
                chunk, size = [], 0
                while start + len(chunk) < len(sentences) and (not chunk or size < chunk_tokens):
                    chunk.append(self._sentence_ids(sentences[start + len(chunk)]))
                    size += len(chunk[-1]) + 2
                flat = torch.from_numpy(flatten(chunk)).to(self._device)
                ln, _ = self._index().score_positions(flat)  # 0 at each <s>
                starts = np.cumsum([0] + [len(ids) + 2 for ids in chunk[:-1]])
                out.extend(np.add.reduceat(ln.double().cpu().numpy(), starts).tolist())
                start += len(chunk)
                bar.update(len(chunk))
        return out

    # -- batched torch queries -----------------------------------------------------------------------

    def _index(self) -> QueryIndex:
        if self._query is None:
            self._query = QueryIndex(self.tables, self.vocab_size, self._device)
        return self._query

    def to(self, device: str | torch.device) -> NgramLM:
        """Move the query tensors (built on first use) to ``device``; returns self."""
        self._device = torch.device(device)
        if self._query is not None:
            self._query.to(self._device)
        return self

    @torch.no_grad()
    def next_token_logprobs(self, contexts: torch.Tensor) -> torch.Tensor:
        """Natural-log distributions over the vocabulary for a batch of contexts.

        contexts: LongTensor [B, m] (m >= 0; the last min(m, n-1) columns are used; left-pad short
        histories with BOS). Returns FloatTensor [B, V] on the model's device.
        """
        q = self._index()
        if contexts.dim() != 2:
            raise ValueError(f"contexts must be [B, m], got shape {tuple(contexts.shape)}")
        contexts = q.clean(contexts)
        if contexts.shape[1] > self.order - 1:
            contexts = contexts[:, contexts.shape[1] - (self.order - 1):]
        if self.order == 1:
            return q.fill([]).expand(contexts.shape[0], -1).clone()
        return q.fill(q.context_entries(contexts))

    @torch.no_grad()
    def sequence_logprobs(self, tokens: torch.Tensor, topk: int | None = None,
                          chunk: int = 4096):
        """Distributions at every position of a batch of sequences (teacher forcing).

        tokens: LongTensor [B, T], tokens[:, 0] normally BOS. Row [b, t] is the natural-log
        distribution of token t+1 given tokens[b, :t+1]. Returns FloatTensor [B, T, V], or with
        ``topk`` the pair (values [B, T, k], indices [B, T, k]) of the k most likely ids,
        computed ``chunk`` positions at a time to bound memory.
        """
        q = self._index()
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        tokens = q.clean(tokens)
        if self.order > 1:
            ends = q.endings(tokens, self.order - 1)
            ctx = [e.reshape(-1) for e in ends]  # order-j entry of the j-gram ending at (b, t)
        else:
            ctx = []
        P = B * T
        if topk is None:
            if self.order == 1:
                return q.fill([]).expand(P, -1).reshape(B, T, -1).clone()
            return q.fill(ctx).view(B, T, -1)
        vals, idx = [], []
        for s in range(0, P, chunk):
            part = [c[s : s + chunk] for c in ctx]
            dense = q.fill(part) if part else q.fill([]).expand(min(chunk, P - s), -1)
            v, i = torch.topk(dense, min(topk, self.vocab_size), dim=-1)
            vals.append(v)
            idx.append(i)
        return torch.cat(vals).view(B, T, -1), torch.cat(idx).view(B, T, -1)


def _check_tables(vocab: list[str], tables: list[OrderTable], path: str) -> None:
    """Shapes, prefix ranges, order and values of loaded tables (a corrupt file fails here, not
    in a query, and not as a perplexity of nan or of n-grams a binary search cannot find)."""
    prev = len(vocab)
    for k, t in enumerate(tables, start=1):
        n = len(t.word)
        if k == 1 and n != prev:
            raise UserError("corrupt n-gram binary: unigram table does not match the vocabulary",
                            path)
        if not (len(t.prefix) == len(t.logp) == len(t.logb) == n):
            raise UserError(f"corrupt n-gram binary: {k}-gram arrays differ in length", path)
        if k == 1 and n and (np.any(t.word != np.arange(n)) or np.any(t.prefix != 0)):
            raise UserError("corrupt n-gram binary: the unigram table is not one entry per word", path)
        if n and k > 1 and (t.prefix.min() < 0 or t.prefix.max() >= prev
                            or t.word.min() < 0 or t.word.max() >= len(vocab)):
            raise UserError(f"corrupt n-gram binary: {k}-gram indices out of range", path)
        # log10 probabilities are <= 0 (-inf only for unigrams that are never predicted: <s>)
        if np.any(np.isnan(t.logp)) or np.any(t.logp > 0) or (k > 1 and not np.all(np.isfinite(t.logp))):
            raise UserError(f"corrupt n-gram binary: {k}-gram log-probabilities must be finite "
                            "and <= 0", path)
        if not np.all(np.isfinite(t.logb)):
            raise UserError(f"corrupt n-gram binary: {k}-gram backoffs must be finite", path)
        if k > 1 and n > 1:  # sorted by (prefix, word), no duplicates: what lookups assume
            keys = t.prefix.astype(np.int64) * len(vocab) + t.word
            if not np.all(keys[1:] > keys[:-1]):
                raise UserError(f"corrupt n-gram binary: {k}-grams are not sorted by context and word",
                                path)
        prev = n


def load_ngram(path: str | os.PathLike) -> NgramLM:
    """Load an n-gram model from an ARPA file (plain or gzipped) or our binary format."""
    path = Path(path)
    with open_regular(path, "n-gram model file") as f:
        head = f.read(64)
    if head.startswith(b"mmap lm "):
        raise UserError("this is a KenLM binary; give the ARPA file instead", str(path))
    if len(head) > 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 1 << 32:
        return NgramLM.load(path)
    return NgramLM.from_arpa(path)
