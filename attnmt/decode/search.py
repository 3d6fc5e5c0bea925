"""Greedy and batched beam search over any model with the encode / init_state / step interface.

``model.step`` may return logits or log-probabilities (log_softmax is idempotent on the latter),
which lets ensembles and n-gram-combined models plug in unchanged.

Beam search keeps K hypotheses per sentence in one (B·K)-row batch. Each step takes the 2K best
extensions; those ending in </s> become finished hypotheses, the best K others continue. A sentence
is done when it has K finished hypotheses or reaches its length limit ``ratio·|x| + extra``.
Finished hypotheses are ranked by log p(y|x) / |y|^α (α = length_penalty; 0 disables it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.models.common import select_batch


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids without <s> and </s>
    logprob: float  # log p(y, </s> | x)
    score: float  # length-normalised score used for ranking
    attention: torch.Tensor | None = None  # (len(tokens) + 1, S): a_t for every step, </s> last


def _max_lengths(src_lengths: torch.Tensor, ratio: float, extra: int, cap: int) -> list[int]:
    return [min(cap, int(math.ceil(ratio * int(n))) + extra) for n in src_lengths.tolist()]


def _normalise(logprob: float, length: int, alpha: float) -> float:
    return logprob / (length**alpha) if alpha > 0 else logprob


def _block_specials(logp: torch.Tensor) -> torch.Tensor:
    logp[:, PAD] = float("-inf")
    logp[:, BOS] = float("-inf")
    return logp


@torch.no_grad()
def greedy_search(
    model,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    max_len_ratio: float = 2.0,
    max_len_extra: int = 10,
    max_len_cap: int = 512,
    need_weights: bool = False,
) -> list[list[Hypothesis]]:
    B = src.size(0)
    limits = _max_lengths(src_lengths, max_len_ratio, max_len_extra, max_len_cap)
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    prefix = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)
    logprob = torch.zeros(B, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(B, dtype=torch.long)
    attn_steps = []
    for t in range(max(limits)):
        logits, state, weights = model.step(prefix, state, enc, need_weights)
        logp = _block_specials(torch.log_softmax(logits.float(), dim=-1))
        best_lp, best = logp.max(dim=-1)
        at_limit = torch.tensor([t + 1 >= lim for lim in limits], device=src.device)
        best = torch.where(done, torch.full_like(best, PAD), best)
        logprob = logprob + torch.where(done, torch.zeros_like(best_lp), best_lp)
        if need_weights and weights is not None:
            attn_steps.append(weights.float().cpu())
        prefix = torch.cat([prefix, best.unsqueeze(1)], dim=1)
        newly = (~done) & ((best == EOS) | at_limit)
        lengths[newly.cpu()] = t + 1
        done = done | newly
        if bool(done.all()):
            break
    out = []
    for b in range(B):
        toks = [i for i in prefix[b, 1 : lengths[b] + 1].tolist() if i not in (EOS, PAD)]
        attn = torch.stack([a[b] for a in attn_steps[: lengths[b]]]) if attn_steps else None
        n = len(toks) + 1
        lp = float(logprob[b])
        out.append([Hypothesis(toks, lp, lp / n, attn)])
    return out


@torch.no_grad()
def beam_search(
    model,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    beam_size: int = 5,
    nbest: int = 1,
    length_penalty: float = 1.0,
    max_len_ratio: float = 2.0,
    max_len_extra: int = 10,
    max_len_cap: int = 512,
    need_weights: bool = False,
) -> list[list[Hypothesis]]:
    """Returns, per sentence, the ``nbest`` best hypotheses, best first."""
    B, K, device = src.size(0), beam_size, src.device
    limits = _max_lengths(src_lengths, max_len_ratio, max_len_extra, max_len_cap)
    enc = model.encode(src, src_lengths)
    rows = torch.arange(B, device=device).repeat_interleave(K)  # (B·K,) sentence of each row
    enc = select_batch(enc, rows)
    state = model.init_state(enc)
    prefix = torch.full((B * K, 1), BOS, dtype=torch.long, device=device)
    # only the first of the K identical start hypotheses may expand
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0
    history: torch.Tensor | None = None  # (B·K, t, S) attention of each live hypothesis
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    active = [True] * B
    for t in range(max(limits)):
        logits, state, weights = model.step(prefix, state, enc, need_weights)
        logp = _block_specials(torch.log_softmax(logits.float(), dim=-1))  # (B·K, V)
        V = logp.size(-1)
        cand = (scores.view(-1, 1) + logp).view(B, K * V)
        top_scores, top_ids = cand.topk(2 * K, dim=-1)  # (B, 2K)
        origin = top_ids // V  # which live hypothesis each candidate extends
        token = top_ids % V
        if need_weights and weights is not None:
            step_w = weights.float().unsqueeze(1)  # (B·K, 1, S)
            history = step_w if history is None else torch.cat([history, step_w], dim=1)
        top_scores_l, token_l, origin_l = top_scores.tolist(), token.tolist(), origin.tolist()
        next_rows, next_scores, next_tokens = [], [], []
        for b in range(B):
            chosen_rows, chosen_scores, chosen_tokens = [], [], []
            for j in range(2 * K):
                s, tok, o = top_scores_l[b][j], token_l[b][j], origin_l[b][j]
                row = b * K + o
                if not active[b] or s == float("-inf"):
                    break
                at_limit = t + 1 >= limits[b]
                if tok == EOS or at_limit:
                    if j < K or (tok != EOS and len(chosen_rows) < K):
                        toks = prefix[row, 1:].tolist() + ([] if tok == EOS else [tok])
                        attn = history[row].clone() if history is not None else None
                        finished[b].append(Hypothesis(toks, s, _normalise(s, len(toks) + 1, length_penalty), attn))
                    continue
                if len(chosen_rows) < K:
                    chosen_rows.append(row)
                    chosen_scores.append(s)
                    chosen_tokens.append(tok)
            if active[b] and (len(finished[b]) >= K or t + 1 >= limits[b]):
                active[b] = False
            while len(chosen_rows) < K:  # pad inactive or short beams with dead rows
                chosen_rows.append(b * K)
                chosen_scores.append(float("-inf"))
                chosen_tokens.append(PAD)
            if not active[b]:
                chosen_scores = [float("-inf")] * K
            next_rows.extend(chosen_rows)
            next_scores.extend(chosen_scores)
            next_tokens.extend(chosen_tokens)
        if not any(active):
            break
        index = torch.tensor(next_rows, device=device)
        prefix = torch.cat([prefix.index_select(0, index), torch.tensor(next_tokens, device=device).unsqueeze(1)], 1)
        scores = torch.tensor(next_scores, device=device).view(B, K)
        state = select_batch(state, index)
        if history is not None:
            history = history.index_select(0, index)
    results = []
    for b in range(B):
        hyps = sorted(finished[b], key=lambda h: h.score, reverse=True)
        results.append(hyps[:nbest] if hyps else [Hypothesis([], float("-inf"), float("-inf"))])
    return results
