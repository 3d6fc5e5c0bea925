"""Lexically constrained beam search (``translate --constraints FILE``): phrases that must appear.

Dynamic beam allocation (Post & Vilar 2018), written for this package's generation interface. Each
sentence has constraint phrases c_1 .. c_m (target ids); C = Σ |c_i| tokens. A hypothesis carries
its progress: which phrases it has met, and how far it is into the one it is writing (a token that
breaks a phrase off loses that phrase's progress). Its bank is the number of constraint tokens it
has produced, 0 .. C. At each step a sentence's candidates are

    the 2K best extensions of its K hypotheses (as plain beam search),
    every hypothesis extended by each token that advances a constraint (the next token of the
    phrase it is in, else the first token of every phrase it has not met), and
    every hypothesis extended by its own best token,

and the K that go on are taken from the banks in turn, highest bank first, each bank's best first
(banks share the beam; an empty bank's share goes to the others). </s> is allowed only once every
phrase is met. Because the highest bank always gets a place and every hypothesis has an
extension that adds a constraint token, the most advanced hypothesis gains one token per step, so
a length limit of P + C + 1 (P: a forced prefix, decode/prefix.py) always leaves a hypothesis
that meets every constraint; the sentence's limit is raised to that. Finished hypotheses that
meet every constraint are ranked by log p(y|x) / |y|^α; others are returned only if none does.

Constraints come from text, one line per input line, through decode/guides.py.
"""

from __future__ import annotations

import torch

from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.decode.prefix import ForcedPrefix
from attnmt.decode.search import Hypothesis, block_specials, max_lengths, nbest_list, normalise
from attnmt.models.common import repeat_rows, select_batch

State = tuple[int, int, int]  # (bitmask of the phrases met, phrase in progress or -1, its tokens so far)
START: State = (0, -1, 0)


class Phrases:
    """The constraint phrases of one sentence, and how a hypothesis's state moves through them."""

    def __init__(self, phrases: list[list[int]]):
        self.phrases = phrases
        self.all = (1 << len(phrases)) - 1
        self.total = sum(len(p) for p in phrases)  # C

    def advance(self, state: State, token: int) -> State:
        met, current, pos = state
        if current >= 0:
            phrase = self.phrases[current]
            if token == phrase[pos]:
                if pos + 1 == len(phrase):
                    return met | (1 << current), -1, 0
                return met, current, pos + 1
        for c, phrase in enumerate(self.phrases):  # not in a phrase (any more): does one start?
            if not met >> c & 1 and phrase[0] == token:
                return (met | (1 << c), -1, 0) if len(phrase) == 1 else (met, c, 1)
        return met, -1, 0

    def progress(self, state: State) -> int:
        """The bank: constraint tokens produced (the phrases met and the one in progress)."""
        met, _, pos = state
        return sum(len(p) for c, p in enumerate(self.phrases) if met >> c & 1) + pos

    def complete(self, state: State) -> bool:
        return state[0] == self.all

    def next_tokens(self, state: State) -> list[int]:
        met, current, pos = state
        if current >= 0:
            return [self.phrases[current][pos]]
        return list({p[0] for c, p in enumerate(self.phrases) if not met >> c & 1})


def _allocate(going: list[tuple], K: int, progress) -> list[tuple]:
    """K of ``going`` (score-sorted (score, row, token, state)), taken from the banks in turn,
    highest bank first: dynamic beam allocation with every bank's share equal."""
    banks: dict[int, list[tuple]] = {}
    for cand in going:
        banks.setdefault(progress(cand[3]), []).append(cand)
    order = sorted(banks, reverse=True)
    picked: list[tuple] = []
    depth = 0
    while len(picked) < K and any(depth < len(banks[b]) for b in order):
        for bank in order:
            if depth < len(banks[bank]) and len(picked) < K:
                picked.append(banks[bank][depth])
        depth += 1
    return sorted(picked, key=lambda c: -c[0])


@torch.no_grad()
def constrained_beam_search(
    model,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    constraints: list[list[list[int]]],
    beam_size: int = 5,
    nbest: int = 1,
    length_penalty: float = 1.0,
    max_len_ratio: float = 2.0,
    max_len_extra: int = 10,
    max_len_cap: int = 512,
    need_weights: bool = False,
    stop: str = "complete",
    forced: ForcedPrefix | None = None,
) -> list[list[Hypothesis]]:
    """Per sentence, the ``nbest`` best hypotheses that contain every phrase of its
    ``constraints`` (a list of id lists per sentence), best first; ``stop`` as beam_search's."""
    B, K, device = src.size(0), beam_size, src.device
    phrases = [Phrases(c) for c in constraints]
    floors = forced.min_lengths() if forced is not None else [1] * B
    limits = max_lengths(src_lengths, max_len_ratio, max_len_extra, max_len_cap,
                         [f + p.total for f, p in zip(floors, phrases)])
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    prefix = torch.full((B * K, 1), BOS, dtype=torch.long, device=device)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # the K start hypotheses are one
    scores = scores.view(-1)
    states: list[list[State]] = [[START] * K for _ in range(B)]  # per live sentence, per row
    finished: list[list[tuple[bool, Hypothesis]]] = [[] for _ in range(B)]
    first: list[Hypothesis | None] = [None] * B  # stop "best", nbest > 1: the fixed 1-best
    alive = list(range(B))
    history: torch.Tensor | None = None
    for t in range(max(limits)):
        n = len(alive)
        if t == 0:  # one step per sentence, then K copies (as beam_search)
            logits, state, weights = model.step(prefix[::K], state, enc, need_weights)
            logits, state, enc = logits.repeat_interleave(K, 0), repeat_rows(state, K), repeat_rows(enc, K)
            weights = weights.repeat_interleave(K, 0) if weights is not None else None
        else:
            logits, state, weights = model.step(prefix, state, enc, need_weights)
        logp = block_specials(torch.log_softmax(logits.float(), dim=-1))  # (n·K, V)
        if forced is not None:
            logp = forced.apply(logp, t, torch.tensor(alive, device=device).repeat_interleave(K))
        unmet = torch.tensor([not phrases[alive[b]].complete(s) for b in range(n) for s in states[b]],
                             device=device)
        logp[:, EOS] = logp[:, EOS].masked_fill(unmet, float("-inf"))  # </s> once all are met
        total = scores.unsqueeze(1) + logp  # (n·K, V)
        V = total.size(1)
        if need_weights and weights is not None:
            step_w = weights.float().unsqueeze(1)
            history = step_w if history is None else torch.cat([history, step_w], dim=1)
        top_v, top_j = (x.tolist() for x in total.view(n, K * V).topk(min(2 * K, K * V), dim=1))
        best_v, best_tok = (x.tolist() for x in total.max(dim=1))
        live = scores.tolist()
        wants = [(r, tok) for r in range(n * K) if live[r] > float("-inf")
                 for tok in phrases[alive[r // K]].next_tokens(states[r // K][r % K])]
        want_v = total[[r for r, _ in wants], [tok for _, tok in wants]].tolist() if wants else []
        by_sentence: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
        for b in range(n):
            for v, j in zip(top_v[b], top_j[b]):
                by_sentence[b][(b * K + j // V, j % V)] = v
            for r in range(b * K, b * K + K):
                by_sentence[b][(r, best_tok[r])] = best_v[r]
        for (r, tok), v in zip(wants, want_v):
            by_sentence[r // K][(r, tok)] = v
        keep, rows, tokens, next_scores, next_states = [], [], [], [], []
        for b in range(n):
            s, rules = alive[b], phrases[alive[b]]
            ranked = sorted(((v, r, tok) for (r, tok), v in by_sentence[b].items() if v > float("-inf")),
                            reverse=True)
            at_limit = t + 1 >= limits[s]
            going = []
            for rank, (v, r, tok) in enumerate(ranked):
                new = states[b][r % K] if tok == EOS else rules.advance(states[b][r % K], tok)
                if tok == EOS or at_limit:
                    if tok == EOS and rank >= K:  # as beam_search: ends among the K best only
                        continue
                    toks = prefix[r, 1:].tolist() + ([] if tok == EOS else [tok])
                    attn = history[r].clone() if history is not None else None
                    hyp = Hypothesis(toks, v, normalise(v, len(toks) + 1, length_penalty), attn)
                    finished[s].append((rules.complete(new), hyp))
                else:
                    going.append((v, r, tok, new))
            picked = _allocate(going, K, rules.progress)
            met = sum(ok for ok, _ in finished[s])
            best_ends = bool(ranked) and ranked[0][2] == EOS and met >= 1
            if stop == "best" and best_ends and first[s] is None and nbest > 1:
                first[s] = _best(finished[s])  # the 1-best, fixed where nbest=1 stops (as beam_search)
            if stop == "best" and nbest > 1:
                best_ends = first[s] is not None and met >= nbest
            if at_limit or met >= K or not picked or (stop == "best" and best_ends):
                continue
            keep.append(b)
            dead = (float("-inf"), b * K, PAD, START)  # fills the beam when fewer candidates go on
            picked += [dead] * (K - len(picked))
            rows += [c[1] for c in picked]
            tokens += [c[2] for c in picked]
            next_scores += [c[0] for c in picked]
            next_states.append([c[3] for c in picked])
        if not keep:
            break
        if len(keep) < n:
            keep_rows = torch.tensor([b * K + k for b in keep for k in range(K)], device=device)
            enc = select_batch(enc, keep_rows)
            alive = [alive[b] for b in keep]
        index = torch.tensor(rows, device=device)
        prefix = torch.cat([prefix.index_select(0, index),
                            torch.tensor(tokens, device=device).unsqueeze(1)], 1)
        scores = torch.tensor(next_scores, device=device)
        states = next_states
        state = select_batch(state, index)
        if history is not None:
            history = history.index_select(0, index)
    return [nbest_list(_good(finished[b]), first[b], nbest) for b in range(B)]


def _good(finished: list[tuple[bool, Hypothesis]]) -> list[Hypothesis]:
    """The finished hypotheses that meet every constraint (all of them if none does)."""
    return [h for ok, h in finished if ok] or [h for _, h in finished]


def _best(finished: list[tuple[bool, Hypothesis]]) -> Hypothesis:
    return max(_good(finished), key=lambda h: h.score)
