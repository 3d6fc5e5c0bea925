"""Local attention's decoding path: ``LocalAttention.prepare`` and ``forward`` without autograd.

Every function takes the LocalAttention module ``att`` first; local_attention.py holds the
equations, the choices the paper leaves open and the training path, and calls this module.

Decoding (autograd off, ``decode``): a decoder step at batch 1 is a few dozen tiny ops, so their
number matters as much as their size. ``prepare`` then stores the states zero-padded by D rows on
each side of every sentence (and zeroed on padding), with an additive mask row (0 on real words,
−inf elsewhere); ``memory.values`` is a view into that buffer, so nothing is copied twice (a
beam search's ``Memory.select`` selects the buffers' rows, see ``PaddedTables``, rather than
padding the selected states again). As in global attention, `general` keys W_a h̄_s are
computed once per sentence there (a step then needs no d×d product per hypothesis for its
score). The window centred at c of entry e is the
D+1+D consecutive rows starting at e·(S+2D) + c of the flattened buffer: one ``index_select`` of
a strided ``unfold`` view gathers all windows of a step (each a contiguous block), with no
clamping or index arithmetic that grows with S; scores and mask are one ``baddbmm``, the context
one ``bmm`` over the same rows. The rows of one sentence (greedy or beam search at batch 1) take
Python-number centres and one slice of its buffers, the window itself (a view) when they agree;
there a step is fifteen-odd tiny ops, and each op and each Python line is counted (about as many
as global attention's at S = 200). local-m needs no gather at all while every sentence is still
longer than t (its windows are then the same slice [t, t+2D] of every entry: a strided view).
Steps with many query rows at long S gather their windows in chunks, so a step's temporaries stay
well below global attention's B×S scores. The memory is shareable: the K beam hypotheses of a
sentence read its one entry, and they mostly look at the same words: in steps with many rows,
on the CPU, a sentence's K windows are read as one block (the rows from its first window to its
last; one gather for all sentences), each row's window cut out of the block by a mask, whenever
that reads fewer rows than the K windows would. The dense (B, T, S) weights are built by
scattering the window weights back, and only when asked for (need_weights=True).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.kernels.cache import growing
from attnmt.kernels.dispatch import Kernel

# attnmt.attention.base.Memory: kernels import no definitions (ARCHITECTURE.md, "Layers"); the
# attention passes its Memory class to ``prepare``
Memory = Any

# the definitions this module computes faster: LocalAttention.prepare / forward, autograd off
IMPLEMENTS = ("attnmt.attention.local_attention.LocalAttention",)

# decoding: a step gathers up to this many window elements at once (256 KB in float32); beyond it,
# at long S, in STEP_CHUNKS chunks, each then smaller than one of the B×T×S score tensors a step of
# global attention allocates (it allocates about three): a step's temporaries stay well below
# global attention's. At short S ((2D+1)·d > STEP_CHUNKS·S) chunks could not do that, and the
# windows are gathered at once rather than in many small products. Beam steps above it read one
# block per sentence instead (``_attend_blocks``), when that reads fewer rows.
STEP_WINDOW_ELEMENTS = 1 << 16
STEP_CHUNKS = 4


def _float32(x: float) -> float:
    """x rounded to the nearest float32 (as a float32 product of exact operands is)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _sigmoid(x: float) -> float:
    """1 / (1 + e^−x) without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def prepare(
    att: nn.Module, values: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
    memory_class: Callable[..., Memory],
) -> Memory:
    """``LocalAttention.prepare`` without autograd: the memory (a ``memory_class``) of values
    (B, S, d) and mask (B, S) that holds the tables of ``pad_memory`` (``padded`` returns them)."""
    # decoding: W_a h̄_s once per sentence, as global attention does (a step then needs no
    # d×d product per hypothesis for the score); the memory's states are views into the
    # padded buffers the steps read
    padding = pad_memory(att, values, values, mask)
    padding.views = padding.memory_views()
    memory = memory_class(**padding.views, mask=mask, lengths=lengths, shareable=True)
    memory.cached(("local-pad", att.window), lambda memory: padding)
    return memory


class PaddedTables:
    """The decoding tables of a memory of E entries, ``tables`` by name (see ``pad_memory``),
    built from the padded buffers: keys and values (E, S+2D, d), the mask bias (E, 1, S+2D)
    and the sentence lengths (E,). ``Memory.select`` carries them over (``select_entries``):
    a beam search dropping its finished sentences then copies the buffers' rows of the others
    once, where padding the selected memory again would copy its states twice. ``views``:
    the memory's ``values`` and ``keys`` when they are views into the buffers (``prepare``).

    ``tables`` is a plain dict: the steps look names up in it, and a dict subclass's lookup
    costs twice a dict's."""

    def __init__(
        self, att: nn.Module, values_pad: torch.Tensor, keys_pad: torch.Tensor,
        bias_pad: torch.Tensor, lengths: torch.Tensor, constant: dict,
    ):
        E, rows = values_pad.shape[:2]  # rows = S + 2D
        W = 2 * att.window + 1
        # (E·(S+2D) − 2D, W, d): window w = rows w..w+2D of the flattened buffer, W·d
        # contiguous numbers (a gather copies each window in one piece)
        unfold = lambda x: x.view(-1, x.size(-1)).unfold(0, W, 1).transpose(1, 2)
        self.att, self.constant = att, constant
        self.views: dict[str, torch.Tensor] | None = None
        self.tables = {
            **constant, "values_pad": values_pad, "keys_pad": keys_pad, "bias_pad": bias_pad,
            "lengths": lengths, "values": unfold(values_pad),
            "keys": unfold(keys_pad) if keys_pad is not values_pad else None,
            "bias": bias_pad.view(-1, 1).unfold(0, W, 1), "min_last": int(lengths.min()) - 1,
            # the first sentence's, for _decode_single and _sentence_step
            "values_0": values_pad[0], "keys_0": keys_pad[0], "bias_0": bias_pad[0],
            "keys_by_column_0": keys_pad[0].unfold(0, W, 1),  # window c: (d_k, W), a view
            "length": int(lengths[0]), "length_t": lengths[0].float(),
            # _attend_blocks: where each entry starts in the flattened buffers
            "entry_start": torch.arange(E, device=values_pad.device) * rows}
        one = E == 1 and att.mode == "local-p" and att.score_is_dot
        self.tables["sentence_step"] = _sentence_step(att, self.tables) if one else None

    def memory_views(self) -> dict[str, torch.Tensor]:
        """{"values": (E, S, d), "keys": (E, S, d_k)}: the rows of the buffers that hold the
        sentences (one tensor for both when keys are values)."""
        t, D = self.tables, self.att.window
        S = t["bias_pad"].size(2) - 2 * D
        values = t["values_pad"].narrow(1, D, S)
        keys = values if t["keys"] is None else t["keys_pad"].narrow(1, D, S)
        return {"values": values, "keys": keys}

    def select_entries(
        self, memory: Memory, entries: torch.Tensor
    ) -> tuple["PaddedTables", dict[str, torch.Tensor]]:
        """The tables of ``memory.select``'s entries (E',): the buffers' rows index_selected
        (the same numbers padding the selected states would give), what derives from them
        built again; and, when ``memory``'s values and keys are this table's views, the
        selected memory's (views into the new buffers; they are then not copied again)."""
        t = self.tables
        values_pad = t["values_pad"].index_select(0, entries)
        keys_pad = values_pad if t["keys"] is None else t["keys_pad"].index_select(0, entries)
        out = PaddedTables(self.att, values_pad, keys_pad, t["bias_pad"].index_select(0, entries),
                           t["lengths"].index_select(0, entries), self.constant)
        if "band" in t:  # _band's mask depends on no entry
            out.tables["band"] = t["band"]
        views = self.views  # a memory padded lazily (by ``padded``) has its own states
        if (views is None or memory.values is not views["values"]
                or memory.keys is not views["keys"]):
            return out, {}
        out.views = out.memory_views()
        return out, out.views


def pad_memory(
    att: nn.Module, values: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor
) -> PaddedTables:
    """The decoding tables of a memory: keys and values (E, S+2D, d) with D zero rows on each
    side of every sentence and zeros on its padding (row j is position j − D), the mask bias
    (E, 1, S+2D) (0 on real words, −inf elsewhere), their unfolded views (window w of the
    flattened buffer: rows w..w+2D), and the shortest sentence's last position."""
    E, S = mask.shape
    D, W = att.window, 2 * att.window + 1
    inside = F.pad(mask, (D, D)).unsqueeze(-1)  # (E, S+2D, 1)
    if keys is values:  # not yet W_a h̄_s, W_memory h̄_s (dot and concat-simple: values again)
        keys = att.score.keys(values)

    padding = not bool(mask.all())  # (a sentence alone has none)

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(E, S + 2 * D, x.size(-1))
        out.narrow(1, D, S).copy_(x)
        # garbage in padding must not reach 0·h̄_s
        return out.masked_fill_(~inside, 0) if padding else out

    values_pad = pad(values)
    keys_pad = values_pad if keys is values else pad(keys)
    bias = torch.zeros(E, 1, S + 2 * D, device=mask.device)
    bias.masked_fill_(~inside.transpose(1, 2), float("-inf"))
    constant = _constant_tables(att, S, mask.device, bias.dtype)
    return PaddedTables(att, values_pad, keys_pad, bias, mask.sum(1), constant)


def _constant_tables(att: nn.Module, S: int, device: torch.device, dtype: torch.dtype) -> dict:
    """The tables of ``pad_memory`` that depend on no sentence (a selected memory's tables
    share them): the Gaussians, offsets, local-p's weights (``_position_weights``), and the
    positions −D..S+D−1 and slots 0..S+2D−1 (views of ranges kept for the longest S so far).
    Kept on the module (kernels/cache.py) until local-p's W_p or v_p changes or the module enters
    or leaves training, as the decoder keeps its packed weights: taking W_pᵀ again cost ~130 µs
    of a 200 µs ``prepare`` per sentence."""
    D, W = att.window, 2 * att.window + 1
    weights = (att.W_p.weight, att.v_p.weight) if att.mode == "local-p" else ()

    def build(previous: tuple[int, dict] | None) -> tuple[int, dict]:
        longest = S if previous is None else max(S, 2 * previous[0])
        gauss = (att.offsets.square() * (-0.5 / att.sigma**2)).view(1, 1, W)  # local-m's
        return longest, {"log_gauss_m": gauss, "log_gauss_row": gauss.view(1, W),
                         "offsets": att.offsets.to(dtype),
                         "positions": torch.arange(-D, longest + D, device=device, dtype=dtype),
                         **_position_weights(att),
                         # _attend_blocks: slots 0, 1, .. of a block
                         "block_slots": torch.arange(longest + 2 * D, device=device, dtype=dtype)}

    _, tables = growing(att, "decoding_constants", weights, build, lambda kept: kept[0] >= S,
                        (device, dtype, att.sigma))
    return {**tables, "positions": tables["positions"][: S + 2 * D],
            "block_slots": tables["block_slots"][: S + 2 * D]}


def _position_weights(att: nn.Module) -> dict[str, torch.Tensor]:
    """local-p's W_pᵀ (d, d), contiguous, and v_p (d, 1), for the steps of a search: one
    ``mm`` of a query row with W_pᵀ costs a third of ``F.linear``'s call at batch 1. Taken
    once per weight version (``_constant_tables``), as the decoder packs its weights."""
    if att.mode != "local-p":
        return {}
    # k(o − f)² = k·o² − 2k·f·o + k·f² for the offsets o and f = p_t − c: one row's Gaussian
    # in ops whose scalars are arguments (f, k·f²), not tensors to wrap; several rows' is
    # k·(s − p_t)² with k a tensor (a Python number is wrapped into one at every call)
    k, o = -0.5 / att.sigma**2, att.offsets.float()
    return {"W_p_t": att.W_p.weight.detach().t().contiguous(),
            "v_p": att.v_p.weight.detach().view(-1, 1),
            "gauss_o2": k * o.square(), "gauss_o": -2 * k * o, "ones": torch.ones_like(o),
            "gauss_k": torch.tensor(k, device=o.device)}


def padded(att: nn.Module, memory: Memory) -> dict:
    """The tables of ``pad_memory`` of a memory, padded once (``prepare`` stores them already;
    ``Memory.select`` carries them over)."""
    return memory.cached(("local-pad", att.window),
                         lambda m: pad_memory(att, m.values, m.keys, m.mask)).tables


def _decode_rows(att: nn.Module, memory: Memory) -> dict[str, torch.Tensor]:
    """Per query row r (entry r // memory.rows), (R, 1, 1): where its entry starts in the
    flattened padded buffer, its sentence's last position and length."""

    def build(memory: Memory) -> dict[str, torch.Tensor]:
        E, S = memory.mask.shape
        entry = torch.arange(E * memory.rows, device=memory.mask.device) // memory.rows
        view = lambda x: x[entry].view(-1, 1, 1)
        return {"start": view(torch.arange(E, device=entry.device) * (S + 2 * att.window)),
                "last": view(memory.lengths - 1), "length": view(memory.lengths).float()}

    return memory.cached(("local-rows", att.window, memory.rows), build)


def decode(
    att: nn.Module, query: torch.Tensor, memory: Memory, positions: torch.Tensor | None,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``LocalAttention.forward`` without autograd, over the padded buffers of ``pad_memory``:
    the same function."""
    pad = padded(att, memory)
    B, T, _ = query.shape
    step = pad["sentence_step"]  # local-p, one sentence: greedy or beam search at batch 1
    if step is not None and T == 1 and (B == 1 or query.device.type == "cpu"):
        out = step(query, need_weights)
        if out is not None:
            return out
    E, S = memory.mask.shape
    t = None
    if att.mode == "local-m":
        if positions is None:
            positions = torch.arange(T, device=query.device)
        t = int(positions) if T == 1 else None
    if B * T == 1 and E == 1 and att.score_is_dot and t is not None:  # local-m, greedy
        return _decode_single(att, query, pad, t, need_weights)
    if t is not None and t <= pad["min_last"]:  # local-m: every window is [t − D, t + D]
        return _decode_aligned(att, query, memory, pad, t, need_weights)
    rows = _decode_rows(att, memory)
    if T > 1:  # one row per (b, t): B·T rows of one step each
        rows = {k: v.repeat_interleave(T, 0) for k, v in rows.items()}
        query = query.reshape(B * T, 1, -1)
    M = B * T
    score_query = query  # general: the keys are W_a h̄_s already
    if att.mode == "local-m":
        p = centre = torch.minimum(positions.repeat(B).view(M, 1, 1), rows["last"])
    else:
        p = rows["length"] * torch.sigmoid(_position_logits(query.view(M, -1), pad)
                                           .view(M, 1, 1))  # (M, 1, 1), float32
        centre = torch.minimum(p.long(), rows["last"])
    d = max(pad["values"].size(2), 0 if pad["keys"] is None else pad["keys"].size(2))
    gathered = M * (2 * att.window + 1) * d  # one window tensor (keys and values in turn)
    if M > E and gathered > STEP_WINDOW_ELEMENTS and query.device.type == "cpu":
        # beams: the rows of a sentence share a block (small steps: its dozen more ops
        # cost more than the gathers they save)
        blocks = _attend_blocks(att, pad, score_query.view(E, M // E, -1), p, centre,
                                need_weights)
        if blocks is not None:
            context, dense = blocks
            return context.view(B, T, -1), dense if dense is None else dense.view(B, T, S)
    if att.mode == "local-m":
        log_gauss = pad["log_gauss_m"]  # p_t is the (integer) centre: the window's constant
    else:
        # k(s − p_t)² = k(o − f)² with f = p_t − c, exact in float32 (c = ⌊p_t⌋, or S − 1
        # when p_t ≥ S − 1), as k·o² − 2k·f·o + k·f² (see _position_weights)
        f = p - centre
        log_gauss = torch.addcmul(pad["gauss_o2"], f, pad["gauss_o"])
        log_gauss.addcmul_(f, f, value=-0.5 / att.sigma**2)
    # window = rows start..start+2D of the flattened buffer
    start = (centre if E == 1 else centre + rows["start"]).view(M)
    if gathered <= STEP_WINDOW_ELEMENTS or gathered > STEP_CHUNKS * M * S:
        context, weights = _attend_windows(att, pad, score_query, start, log_gauss)
    else:  # long S: STEP_CHUNKS chunks, each below one B×S score tensor of global's
        step = -(-M // STEP_CHUNKS)
        gauss = log_gauss.expand(M, 1, -1)
        parts = [
            _attend_windows(att, pad, score_query[i : i + step], start[i : i + step],
                            gauss[i : i + step])
            for i in range(0, M, step)
        ]
        context, weights = (torch.cat(x) for x in zip(*parts))
    context = context.view(B, T, -1)
    if not need_weights:
        return context, None
    # back to source positions: window slot w of centre c is row c + w of the padded buffer
    slots = centre.view(M, 1, 1) + (att.offsets + att.window)
    dense = weights.new_zeros(M, 1, S + 2 * att.window).scatter_(2, slots, weights)
    return context, dense.narrow(2, att.window, S).reshape(B, T, S)


def _attend_blocks(
    att: nn.Module, pad: dict, score_query: torch.Tensor, p: torch.Tensor, centre: torch.Tensor,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The rows of a beam, g per sentence (score_query (E, g, d)), mostly attend to about
    the same words: each sentence's g windows are read as one block of the padded buffers,
    the rows lo..hi + 2D that they cover (lo, hi: its least and greatest centre), with each
    row's window cut out of the block by a mask. One gather of E blocks (a slice when E = 1)
    and one product per sentence then replace the gather of E·g windows, g times fewer
    rows when the hypotheses agree. Returns the context (E·g, 1, d) and the dense weights
    (E·g, 1, S) or None, or None when the blocks would not read fewer rows than the windows
    (the hypotheses far apart): the caller then gathers windows.

    The block costs one host read of the centres per step, so it is taken on the CPU only."""
    E, g, _ = score_query.shape
    D, W = att.window, 2 * att.window + 1
    c = centre.view(E, g)
    lo = c.amin(1, keepdim=True)  # (E, 1): each sentence's first window row
    span = int((c - lo).max()) + W  # rows per block: the widest sentence's
    if span * E >= W * E * g:  # no fewer rows than the windows
        return None
    rows_per_entry = pad["values_pad"].size(1)  # S + 2D
    lo.clamp_(max=rows_per_entry - span)  # a narrower sentence's block stays in its rows
    if E == 1:
        first = int(lo)
        cut = lambda x: x.narrow(1, first, span)  # (1, span, ·): a view, no copy
    else:
        starts = lo.view(E) + pad["entry_start"]

        def cut(x: torch.Tensor) -> torch.Tensor:  # (E, span, ·): one gather
            rows = x.reshape(-1, x.size(-1)).unfold(0, span, 1).transpose(1, 2)
            return rows.index_select(0, starts)

    values = cut(pad["values_pad"])
    keys = values if pad["keys"] is None else cut(pad["keys_pad"])
    bias = cut(pad["bias_pad"].transpose(1, 2)).transpose(1, 2)  # (E, 1, span)
    scores = _window_scores(att, score_query, keys.transpose(1, 2), bias)  # (E, g, span)
    # slot j of the block is padded row lo + j, i.e. source position lo + j − D: offset
    # o = lo + j − D − c from a row's centre c (its window: o = −D..D)
    offset = pad["block_slots"][:span] - (c - lo + D).unsqueeze(-1)  # (E, g, span)
    scores.masked_fill_(offset.abs() > D, float("-inf"))  # outside the row's window
    log_gauss = None
    if att.gaussian:  # k(o − (p_t − c))², as the window path
        distance = offset if p is centre else offset - (p - centre).view(E, g, 1)
        log_gauss = distance.square_().mul_(-0.5 / att.sigma**2)
    weights = _window_weights(att, scores, log_gauss)  # (E, g, span)
    context = torch.bmm(weights.to(values.dtype), values).view(E * g, 1, -1)
    if not need_weights:
        return context, None
    S = pad["values_pad"].size(1) - 2 * D
    slots = (lo.unsqueeze(-1) + pad["block_slots"][:span].long()).expand(E, g, span)
    dense = weights.new_zeros(E, g, S + 2 * D).scatter_(2, slots, weights)
    return context, dense.narrow(2, D, S).reshape(E * g, 1, S)


def _attend_windows(
    att: nn.Module, pad: dict, score_query: torch.Tensor, start: torch.Tensor,
    log_gauss: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Context (M, 1, d) and window weights (M, 1, W) of M one-step query rows whose windows
    start at rows ``start`` (M,) of the flattened padded buffers."""
    keys = pad["values" if pad["keys"] is None else "keys"].index_select(0, start)  # (M, W, d)
    bias = pad["bias"].index_select(0, start)  # (M, 1, W): 0, or −inf outside the sentence
    scores = _window_scores(att, score_query, keys.transpose(1, 2), bias)
    if pad["keys"] is not None:  # keys ≠ values: one window tensor alive at a time
        del keys
        values = pad["values"].index_select(0, start)
    else:
        values = keys
    weights = _window_weights(att, scores, log_gauss)
    return torch.bmm(weights.to(values.dtype), values), weights


def _position_logits(x: torch.Tensor, pad: dict) -> torch.Tensor:
    """v_pᵀ tanh(W_p h_t) (M, 1) of query rows x (M, d), float32."""
    h = torch.mm(x, pad["W_p_t"]).tanh_()  # (under autocast: in its precision)
    if h.dtype == torch.float32:  # (a no-op .to() is still a call: a batch-1 step counts them)
        return torch.mm(h, pad["v_p"])
    return torch.mm(h, pad["v_p"].to(h.dtype)).float()


def _decode_single(
    att: nn.Module, query: torch.Tensor, pad: dict, t: int, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """local-m's one query row of one sentence (dot or general score; greedy search at batch
    1): the window at min(t, S − 1), a view of the unfolded buffers; the mask of the
    sentence's ends is added only where the window leaves it."""
    D, W = att.window, 2 * att.window + 1
    last = pad["min_last"]  # the sentence's last position
    c = min(t, last)
    scores = torch.mm(query.view(1, -1), pad["keys_by_column_0"][c])  # (1, W)
    if scores.dtype != torch.float32:
        scores = scores.float()
    if not D <= c <= last - D:  # −inf where the window leaves the sentence
        scores = scores + pad["bias_0"][:, c : c + W]
    values = pad["values"][c]  # (W, d): positions c − D .. c + D
    weights = _window_weights(att, scores, pad["log_gauss_row"])  # a constant Gaussian, if any
    context = torch.mm(weights.to(values.dtype), values).view(1, 1, -1)
    if not need_weights:
        return context, None
    S = pad["values_pad"].size(1) - 2 * D
    dense = weights.new_zeros(1, S + 2 * D)
    dense.narrow(1, c, W).copy_(weights)
    return context, dense.narrow(1, D, S).reshape(1, 1, S)


def _sentence_step(att: nn.Module, pad: dict) -> Callable:
    """local-p's step for the K query rows of one sentence (greedy or beam search at batch 1),
    with a dot product score: ``step(query (K, 1, d), need_weights)`` -> the context (K, 1, d)
    and the weights (K, 1, S) or None; or None when the rows' windows are so far apart that
    one slice would read no fewer rows than K gathered windows (the caller gathers them).

    A step there is fifteen to twenty tiny ops, each costing more than its arithmetic, and
    the Python between them is as much again, so the closure holds what it reads as locals.
    The centres are Python numbers, and the rows read one slice of the padded buffers, from
    their first window's row to their last's: the window itself (a view of the unfolded
    buffers) for one row, or for K hypotheses that agree, as they mostly do; when their
    centres differ, a band mask cuts each row's window out of the slice. The mask of the
    sentence's ends is added only where the slice leaves it. One row's p_t and Gaussian are
    taken on Python floats (rounded as float32 rounds them; the Gaussian as k·o² − 2k·f·o +
    k·f², f = p_t − c, in ops whose scalars are arguments, see _position_weights); several
    rows' p_t is the training path's float32 sigmoid to its last bit, their Gaussian
    k(s − p_t)² over the slice's positions s."""
    D, W, k = att.window, 2 * att.window + 1, -0.5 / att.sigma**2
    W_p_t, v_p, length, last = pad["W_p_t"], pad["v_p"], pad["length"], pad["min_last"]
    o2, o, ones, bias = pad["gauss_o2"], pad["gauss_o"], pad["ones"], pad["bias_0"]
    windows, keys_by_column = pad["values"], pad["keys_by_column_0"]  # (W, d), (d_k, W) at c
    values_0, keys_0 = pad["values_0"], pad["keys_0"]  # the padded buffers (S + 2D, ·)
    length_t, positions, k_t = pad["length_t"], pad["positions"], pad["gauss_k"]
    paper, dtype = att.composition == "paper", windows.dtype
    S = pad["values_pad"].size(1) - 2 * D
    mm, add, softmax, sigmoid, float32 = (torch.mm, torch.add, torch.softmax, torch.sigmoid,
                                          torch.float32)
    band = _band

    def step(query: torch.Tensor, need_weights: bool):
        K = query.size(0)
        x = query.view(K, -1)  # h_t (general: the keys are W_a h̄_s already)
        logits = mm(mm(x, W_p_t).tanh_(), v_p)  # v_pᵀ tanh(W_p h_t): (K, 1)
        if K == 1:  # p_t = S·σ(·)
            p = _float32(length * _float32(_sigmoid(float(logits))))
            lo = min(int(p), last)
            span = W
        else:
            p = sigmoid(logits).mul_(length_t)  # (K, 1)
            centres = [min(int(p_k), last) for (p_k,) in p.tolist()]
            lo = min(centres)
            span = max(centres) - lo + W
            if span >= K * W:
                return None
        if span == W:  # one window
            values, keys = windows[lo], keys_by_column[lo]
        else:
            values, keys = values_0[lo : lo + span], keys_0[lo : lo + span].t()
        inside = D <= lo and lo + span <= last + D + 1  # the slice, in the sentence
        if span == W:
            mask = None if inside else bias[:, lo : lo + W]
        else:  # −inf outside each row's window, and outside the sentence
            mask = band(att, pad, span).index_select(0, torch.tensor(centres).sub_(lo))
            if not inside:
                mask.add_(bias[:, lo : lo + span])
        scores = mm(x, keys) if mask is None else torch.addmm(mask, x, keys)  # (K, span)
        if scores.dtype != float32:
            scores = scores.float()
        if K == 1:  # eq. 10 with log_gauss = k(o − f)²
            f = p - lo
            log_gauss = add(o2, o, alpha=f)
            if paper:  # (inside: k·f² is the same in every slot, softmax drops it)
                log_gauss.add_(ones, alpha=k * f * f)
        else:  # k(s − p_t)², slot j of the slice is position lo + j − D
            log_gauss = (positions[lo : lo + span] - p).square_().mul_(k_t)
        if paper:  # eq. 7 and 10
            weights = softmax(scores, -1).mul_(log_gauss.exp_())
        else:
            weights = softmax(scores.add_(log_gauss), -1)
        if weights.dtype != dtype:
            weights = weights.to(dtype)
        context = mm(weights, values).view(K, 1, -1)
        if not need_weights:
            return context, None
        dense = weights.new_zeros(K, S + 2 * D)
        dense.narrow(1, lo, span).copy_(weights)
        return context, dense.narrow(1, D, S).reshape(K, 1, S)

    return step


def _band(att: nn.Module, pad: dict, span: int) -> torch.Tensor:
    """(R, span), R ≥ span − 2D: row i is 0 on columns i .. i + 2D and −inf elsewhere (the
    window of a centre i rows past a slice's first centre), built once per memory."""
    band = pad.get("band")
    if band is None or band.size(1) < span:
        rows = torch.arange(span, device=pad["bias_0"].device).view(-1, 1)
        columns = torch.arange(span, device=rows.device)
        outside = (columns < rows) | (columns > rows + 2 * att.window)
        band = pad["band"] = torch.zeros(span, span, device=rows.device).masked_fill_(
            outside, float("-inf"))
    return band[:, :span]


def _decode_aligned(
    att: nn.Module, query: torch.Tensor, memory: Memory, pad: dict, t: int, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """local-m's step t when every sentence is longer than t: each query row's window is the
    slice [t, t+2D] of its entry's padded buffer, a view (no gather); the K rows of a beam
    that share an entry are one (K, d) × (d, W) product."""
    B = query.size(0)
    E, S = memory.mask.shape
    W = 2 * att.window + 1
    score_query = query.reshape(E, B // E, -1)  # (E, k, d); general: keys are W_a h̄_s
    keys = pad["keys_pad"].narrow(1, t, W)  # (E, W, d_k)
    values = pad["values_pad"].narrow(1, t, W)
    bias = pad["bias_pad"].narrow(2, t, W)
    scores = _window_scores(att, score_query, keys.transpose(1, 2), bias)
    weights = _window_weights(att, scores, pad["log_gauss_m"])  # (E, k, W)
    context = torch.bmm(weights.to(values.dtype), values).view(B, 1, -1)
    if not need_weights:
        return context, None
    dense = weights.new_zeros(E, B // E, S + 2 * att.window)
    dense.narrow(2, t, W).copy_(weights)
    return context, dense.narrow(2, att.window, S).reshape(B, 1, S)


def _window_scores(
    att: nn.Module, score_query: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """score(h_t, h̄_s) + mask bias (float32) for N groups of k query rows sharing a window:
    score_query (N, k, d), keys (N, d_k, W) (a window's keys as columns), bias (N, 1, W)
    -> (N, k, W)."""
    if att.score_is_dot:
        if score_query.dtype == bias.dtype and not torch.is_autocast_enabled(bias.device.type):
            return torch.baddbmm(bias, score_query, keys)  # one op: scores and mask
        return torch.bmm(score_query, keys).float() + bias
    windows = keys.transpose(1, 2).unsqueeze(1)  # (N, 1, W, d_k)
    return att.score(score_query, windows).float() + bias  # concat: (N, k, W)


def _window_weights(
    att: nn.Module, scores: torch.Tensor, log_gauss: torch.Tensor
) -> torch.Tensor:
    """Eq. 7 inside the window, with eq. 10's Gaussian (log_gauss) as composed."""
    if att.gaussian and att.composition == "inside":
        scores = scores + log_gauss
    weights = torch.softmax(scores, dim=-1)
    if att.gaussian and att.composition == "paper":
        weights = weights * log_gauss.exp()  # eq. 10
    return weights


KERNELS = (Kernel("local_decoding.decode", "attention search", IMPLEMENTS[0], "every score",
                   lambda att: (True, ""), ("cpu", "cuda"), decode),)
