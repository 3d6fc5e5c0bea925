"""Token-id datasets and length-bucketed batches.

Batches group sentences of similar length (less padding) and are shuffled as whole batches. The
order is a pure function of (seed, epoch), so a resumed run sees exactly the batches it would have
seen, and data-parallel ranks can each take every N-th batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnmt.data.vocab import BOS, EOS, PAD


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


def encode_corpus(
    tokenizer, lines: list[str], reverse: bool = False
) -> list[list[int]]:
    ids = [tokenizer.encode(line) for line in lines]
    return [seq[::-1] for seq in ids] if reverse else ids


def filter_by_length(
    src: list[list[int]], tgt: list[list[int]], max_len: int
) -> tuple[list[list[int]], list[list[int]], int]:
    """Drop pairs with either side longer than max_len tokens (the paper: 50); returns the count."""
    keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if len(s) <= max_len and len(t) <= max_len and s and t]
    return [src[i] for i in keep], [tgt[i] for i in keep], len(src) - len(keep)


def collate(src: list[list[int]], tgt: list[list[int]] | None, index: list[int]) -> Batch:
    B = len(src)
    S = max(len(s) for s in src)
    src_t = torch.full((B, S), PAD, dtype=torch.long)
    for i, s in enumerate(src):
        src_t[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in src], dtype=torch.long)
    if tgt is None:
        empty = torch.zeros((B, 0), dtype=torch.long)
        return Batch(src_t, lengths, empty, empty, torch.tensor(index))
    T = max(len(t) for t in tgt) + 1
    tgt_in = torch.full((B, T), PAD, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD, dtype=torch.long)
    for i, t in enumerate(tgt):
        seq = torch.tensor(t, dtype=torch.long)
        tgt_in[i, 0] = BOS
        tgt_in[i, 1 : len(t) + 1] = seq
        tgt_out[i, : len(t)] = seq
        tgt_out[i, len(t)] = EOS
    return Batch(src_t, lengths, tgt_in, tgt_out, torch.tensor(index))


def make_batches(
    src: list[list[int]],
    tgt: list[list[int]],
    batch_size: int,
    by: str = "sents",
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
) -> list[list[int]]:
    """Index lists of length-bucketed batches.

    by="sents": batch_size sentences per batch; by="tokens": at most batch_size padded target
    tokens per batch. With shuffle, lengths get small random jitter so buckets vary per epoch, and
    the batch order is shuffled; everything is seeded by (seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch])
    lengths = np.array([max(len(s), len(t)) for s, t in zip(src, tgt)], dtype=np.float64)
    if shuffle:
        lengths = lengths + rng.uniform(0, 1.5, size=len(lengths))
    order = np.argsort(lengths, kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order.tolist():
        size = max(longest, len(tgt[i]) + 1, len(src[i]))
        if current and (
            (by == "sents" and len(current) >= batch_size)
            or (by == "tokens" and size * (len(current) + 1) > batch_size)
        ):
            batches.append(current)
            current, longest = [], 0
            size = max(len(tgt[i]) + 1, len(src[i]))
        current.append(i)
        longest = size
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def iterate_batches(
    src: list[list[int]], tgt: list[list[int]], index_batches: list[list[int]]
):
    for idx in index_batches:
        yield collate([src[i] for i in idx], [tgt[i] for i in idx], idx)
