"""The decoder's self-attention keys during a search, in preallocated buffers: the same keys as
the definition's cache, without its copies.

The definition (models/transformer.py, ``Layer.forward``): a layer's state is a dict of the
keys of every earlier position, each (rows, H, t, ·) (K, V and a variant's extra keys, e.g.
window-*'s ``pk``/``lk``), grown by ``torch.cat`` at every step, and a beam search reorders it
(``select_batch``: ``index_select`` of every key) at every step. So a step copies the whole
cache twice per layer.

``KVBuffer`` holds the same keys as views ``[:, :, :t]`` of (rows, H, T_cap, ·) buffers:

    extend(keys)   writes the new positions at t (no copy of the earlier ones) and returns
                   the views the attention reads: equal to torch.cat([cache, keys], dim=2)
    select(index)  one index_select of [:, :, :t] into a second, spare buffer (ping-pong):
                   equal to cache.index_select(0, index); fewer rows too (a beam search dropping
                   finished sentences)
    repeat_rows(k) beam search's K copies of the first step's state

T_cap grows by doubling (amortised: a copy per doubling, not per step). A state is used once,
as every search uses it (step it, or reorder it, then drop it); using an older state again still
gives the right keys: a buffer is written in place only by the newest state that holds it
(``generation``), the spare only when no state holds it (``holders``), else new buffers are made.

``SharedMemory`` / ``SharedKeys``: the cross-attention keys of the encoder output, computed once
per sentence (``Transformer.encode``), read by the sentence's K beam rows without the K copies
that ``repeat_rows(enc, K)`` makes of them (as RNN attention's ``Memory.rows``).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from attnmt.kernels import packed
from attnmt.kernels.attention_dropout import mask_bias
from attnmt.kernels.dispatch import Kernel, choose

# the definitions: the self-attention key cache of a Transformer decoder layer (torch.cat per step,
# index_select per beam reorder); multi-head cross-attention over the keys repeated per hypothesis
IMPLEMENTS = ("attnmt.models.transformer.Layer", "attnmt.attention.multihead.MultiHeadAttention")

FIRST_CAP = 64  # positions allocated at the first step (doubled when a search outgrows them)
_AMX = packed.amx_tiles()  # one_query_attention's bfloat16 layout through SDPA
LOW_STEP = 8  # the bfloat16 layout's capacity: the length rounded up to a multiple of this
FEW_ENTRIES = 4  # SharedKeys.low_context: at most this many sentences take SDPA

# the layouts of a layer's buffers, by name:
#   "heads"  (rows, H, T_cap, ·): the definition's layout, any keys (a variant's too)
#   "time"   K and V time-major, (T_cap, rows, H, d): one_query_attention's float32 layout
#   "low"    K and V in bfloat16, (rows, H, T_cap, d) with T_cap the length rounded up to
#            LOW_STEP: one_query_attention of a bfloat16 search reads all T_cap positions (the
#            ones past the length masked), so every product's operand is contiguous
ONE_QUERY_LAYOUTS = ("time", "low")


class _Buffers:
    """(rows, H, T_cap, ·) tensors by key name (or another of the layouts above), the KVBuffer
    states reading them, and the spare set a reorder writes into."""

    def __init__(self, tensors: dict[str, torch.Tensor], layout: str = "heads"):
        self.tensors = tensors
        self.layout = layout
        first = next(iter(tensors.values()))
        self.rows, self.cap = (first.size(1), first.size(0)) if layout == "time" else (first.size(0), first.size(2))
        self.generation = 0  # of the newest state reading these: the one allowed to write at its length
        self.holders: weakref.WeakSet = weakref.WeakSet()  # every live state reading these
        self.spare: _Buffers | None = None

    @property
    def one_query(self) -> bool:
        return self.layout in ONE_QUERY_LAYOUTS

    @staticmethod
    def like(keys: dict[str, torch.Tensor], rows: int, cap: int, layout: str = "heads") -> _Buffers:
        if layout == "time":
            return _Buffers({n: k.new_empty(cap, rows, k.size(1), k.size(3)) for n, k in keys.items()}, layout)
        if layout == "low":  # zeros: a masked position must hold a finite key (0 · weight)
            return _Buffers({n: k.new_zeros(rows, k.size(1), cap, k.size(3), dtype=torch.bfloat16)
                             for n, k in keys.items()}, layout)
        return _Buffers({name: k.new_empty(rows, k.size(1), cap, *k.shape[3:]) for name, k in keys.items()})

    def empty(self, rows: int) -> _Buffers:
        """Buffers of this layout and capacity for ``rows`` rows."""
        if self.layout == "time":
            return _Buffers({n: t.new_empty(t.size(0), rows, *t.shape[2:]) for n, t in self.tensors.items()}, "time")
        return _Buffers({n: t.new_empty(rows, *t.shape[1:]) for n, t in self.tensors.items()}, self.layout)

    def view(self, name: str, rows: int, start: int, end: int) -> torch.Tensor:
        """Rows :rows, positions start:end of one buffer, in its own layout."""
        t = self.tensors[name]
        return t[start:end, :rows] if self.layout == "time" else t[:rows, :, start:end]

    def write(self, name: str, rows: int, start: int, keys: torch.Tensor) -> None:
        """Store ``keys`` (rows, H, T, ·) of the definition's layout at positions start.."""
        view = self.view(name, rows, start, start + keys.size(2))
        view.copy_(keys.permute(2, 0, 1, 3) if self.layout == "time" else keys)

    def fits(self, keys: dict[str, torch.Tensor], rows: int, length: int) -> bool:
        if self.rows < rows or self.cap < length or self.tensors.keys() != keys.keys():
            return False
        if self.layout == "time":
            return all(b.shape[2:] == (k.size(1), k.size(3)) and b.dtype == k.dtype
                       for b, k in ((self.tensors[n], keys[n]) for n in keys))
        dtype = torch.bfloat16 if self.layout == "low" else None
        return all(b.shape[1] == k.shape[1] and b.shape[3:] == k.shape[3:] and b.dtype == (dtype or k.dtype)
                   for b, k in ((self.tensors[n], keys[n]) for n in keys))


class KVBuffer:
    """One decoder layer's self-attention keys of positions < ``length`` for ``rows`` rows (see the
    module docstring). An empty one (``KVBuffer()``) is the state before the first step."""

    def __init__(self, buffers: _Buffers | None = None, rows: int = 0, length: int = 0):
        self.buffers, self.rows, self.length = buffers, rows, length
        if buffers is not None:  # no strong reference back: a dropped state is freed at once
            buffers.generation += 1
            self.generation = buffers.generation
            buffers.holders.add(self)

    def __bool__(self) -> bool:
        return True  # a state, even before its first step (Stack tests ``caches`` for truth)

    @property
    def one_query(self) -> bool:
        """Whether these keys are in a layout of ``one_query_attention`` (see ``extend``)."""
        return self.buffers is not None and self.buffers.one_query

    @property
    def layout(self) -> str | None:
        """The buffers' layout ("heads", "time" or "low"; None before the first step)."""
        return None if self.buffers is None else self.buffers.layout

    def keys(self) -> dict[str, torch.Tensor]:
        """The cached keys, each (rows, H, length, ·): views, valid until the next extend/select
        (in the time-major layout, (rows, H, t, d) views of its buffers; in the bfloat16 one,
        float32 copies)."""
        b = self.buffers
        views = {n: b.view(n, self.rows, 0, self.length) for n in b.tensors}
        if b.layout == "time":  # (t, rows, H, d) -> (rows, H, t, d)
            return {n: v.permute(1, 2, 0, 3) for n, v in views.items()}
        if b.layout == "low":
            return {n: v.float() for n, v in views.items()}
        return views

    def low_keys(self) -> dict[str, torch.Tensor]:
        """The bfloat16 layout's keys as they are, (rows, H, T_cap, d) over the whole capacity:
        contiguous bfloat16 operands for a search step's products (``packed.bf16_products``;
        torch's bfloat16 batched product copies a strided one), the positions past the length
        finite and hidden by the step's causal mask (its query sits at length − 1)."""
        return {n: t[: self.rows] for n, t in self.buffers.tensors.items()}

    def extend(self, new: dict[str, torch.Tensor], one_query: bool = False, low: bool = False
               ) -> tuple[dict[str, torch.Tensor] | None, KVBuffer]:
        """(cat of the cache and ``new`` (rows, H, T, ·) on the time axis, the state holding it).

        ``one_query``: the caller attends with ``one_query_attention`` when it can. Buffers made
        by this call then take one of its layouts (plain ``k``, ``v`` keys only): bfloat16 with
        ``low`` (a bfloat16 search), else float32 time-major; and the keys returned are None
        when the state has it (``state.one_query``). ``low`` without ``one_query`` (a variant's
        search step whose keys are plain K and V, e.g. relative positions): the bfloat16 layout
        too, its keys returned as ``low_keys`` (half the bytes to reorder, none to convert: the
        caller runs the variant's products under ``packed.bf16_products``, causally masked).
        Buffers keep the layout they were made with."""
        first = next(iter(new.values()))
        rows, end = first.size(0), self.length + first.size(2)
        b = self.buffers
        if self.length and rows != self.rows:
            raise ValueError(f"keys of {rows} rows extend a cache of {self.rows}")
        if b is None or b.generation != self.generation or not b.fits(new, rows, end):
            if b is not None:
                layout = b.layout
            elif new.keys() == {"k", "v"} and (low or one_query):
                layout = "low" if low else "time"
            else:
                layout = "heads"
            if layout == "low":  # grows by LOW_STEP: every position up to the capacity is read
                cap = -(-end // LOW_STEP) * LOW_STEP
            else:
                cap = FIRST_CAP if b is None else b.cap
                while cap < end:
                    cap *= 2
            fresh = _Buffers.like(new, rows, cap, layout)
            if self.length:  # an older state used again, or a full buffer: copy what it holds
                for n in fresh.tensors:
                    fresh.view(n, rows, 0, self.length).copy_(b.view(n, rows, 0, self.length))
            b = fresh
        for n, k in new.items():
            b.write(n, rows, self.length, k)
        state = KVBuffer(b, rows, end)
        if b.one_query and one_query:
            return None, state
        return (state.low_keys() if b.layout == "low" and low else state.keys()), state

    def select(self, index: torch.Tensor) -> KVBuffer:
        """The cache of rows ``index``: as ``index_select(0, index)`` of every key."""
        if self.buffers is None:
            return self
        b, n = self.buffers, index.numel()
        spare = b.spare
        if spare is None or len(spare.holders) or spare.rows < n or spare.cap != b.cap:
            spare = b.empty(max(n, b.rows))
        dim = 1 if b.layout == "time" else 0
        end = b.cap if b.layout == "low" else self.length  # "low": contiguous, and finite past the length
        for name in b.tensors:
            torch.index_select(b.view(name, self.rows, 0, end), dim, index,
                               out=spare.view(name, n, 0, end))
        spare.spare, b.spare = b, None  # the old buffers become the next reorder's target
        return KVBuffer(spare, n, self.length)

    def repeat_rows(self, k: int) -> KVBuffer:
        """Every row repeated k times in place (beam search's first step)."""
        if self.buffers is None:
            return self
        index = torch.arange(self.rows, device=next(iter(self.buffers.tensors.values())).device)
        return self.select(index.repeat_interleave(k))


def bf16_search_on(attn, x: torch.Tensor) -> bool:
    """Whether attention ``attn`` runs in a bfloat16 search on the CPU (its maps' ``bf16_search``,
    set by ``attnmt translate``'s precision), for input ``x``."""
    return bool(getattr(attn.q, "bf16_search", False)) and x.device.type == "cpu"


def one_query_step(attn, x: torch.Tensor, mask: torch.Tensor | None, internals: dict | None) -> bool:
    """Whether a decoder self-attention call is a search step of one query per row, no mask, no
    internals (where ``one_query_attention`` computes it, if ``dispatch.choose`` picks it)."""
    return (internals is None and mask is None and x.size(1) == 1 and not attn.training
            and not torch.is_grad_enabled())


def one_query_attention(attn, queries: torch.Tensor, state: KVBuffer) -> torch.Tensor:
    """``MultiHeadAttention.forward`` of one query per row over every cached key (a search step of
    standard self-attention, no mask): softmax(q Kᵀ/√d) V as two batched products over the
    buffers, read in place. Time-major (float32), a layer's keys of positions < t are one
    contiguous block, which on the CPU the products stream through faster than SDPA's
    one-query kernel walks its (rows, H, T_cap, d) buffers. In the bfloat16 layout ("low", a
    bfloat16 search) every operand is contiguous (torch's bfloat16 product copies any other)
    and half the bytes: the products run over all T_cap positions, those past t masked; on a
    CPU with AMX tiles, torch's bfloat16 SDPA over the first t positions instead (faster there,
    and closer to float32: half the mean error of the two products on random keys).
    queries (rows, H, 1, d_h) -> (rows, 1, D)."""
    b = state.buffers
    if b.layout == "low":
        return attn.o(attn._merge(low_context(queries.to(torch.bfloat16), state, attn.scale).float()))
    k = b.view("k", state.rows, 0, state.length).permute(1, 2, 3, 0)  # (rows, H, d, t)
    v = b.view("v", state.rows, 0, state.length).permute(1, 2, 0, 3)  # (rows, H, t, d)
    weights = torch.softmax(torch.matmul(queries, k).mul_(attn.scale), dim=-1)
    return attn.o(attn._merge(torch.matmul(weights, v)))


def low_context(queries: torch.Tensor, state: KVBuffer, scale: float) -> torch.Tensor:
    """``one_query_attention``'s context in the bfloat16 layout, before W_o: queries (rows, H, 1,
    d_h) bfloat16 -> (rows, H, 1, d_h) bfloat16."""
    b = state.buffers
    if _AMX:
        # torch's bfloat16 SDPA over the first t positions: on AMX tiles 1.2-1.9x the two products
        # below (320 rows, d 256, t 5-77, one thread of an Intel Xeon); without AMX it is not measured
        k, v = b.tensors["k"][: state.rows, :, : state.length], b.tensors["v"][: state.rows, :, : state.length]
        return F.scaled_dot_product_attention(queries, k, v, scale=scale)
    k, v = b.tensors["k"][: state.rows], b.tensors["v"][: state.rows]  # (rows, H, T_cap, d)
    scores = torch.matmul(queries, k.transpose(2, 3)).float().mul_(scale)
    if state.length < b.cap:
        scores[..., state.length :] = float("-inf")
    return torch.matmul(torch.softmax(scores, dim=-1).to(torch.bfloat16), v)


class Picked:
    """Tensors (by name) read at ``entries`` of their first axis (None: all of them), selected
    when first read. A bfloat16 search reads its memory's bfloat16 and laid-out copies, never the
    float32 keys they were made from: those are not copied again at every sentence that leaves
    the batch (the laid-out ones are; a selection of a selection composes the two indices)."""

    def __init__(self, tensors: dict[str, torch.Tensor], entries: torch.Tensor | None = None):
        self._tensors, self._entries = tensors, entries

    def get(self) -> dict[str, torch.Tensor]:
        if self._entries is not None:
            self._tensors = {n: t.index_select(0, self._entries) for n, t in self._tensors.items()}
            self._entries = None
        return self._tensors

    def pick(self, entries: torch.Tensor) -> Picked:
        return Picked(self._tensors, entries if self._entries is None else self._entries.index_select(0, entries))


class SharedKeys:
    """One decoder layer's cross-attention keys: one entry per sentence, read by ``rows``
    consecutive query rows each (beam search's K hypotheses), as the definition reads them
    repeated K times (``repeat_rows(enc, K)``: K copies of every key). ``attend`` is
    ``MultiHeadAttention.forward`` on the repeated keys: for standard attention of one query per
    row without weights, the K queries of a sentence as one block of queries against its keys
    (one SDPA call, no copy); otherwise the definition on keys repeated once per state."""

    def __init__(self, keys: dict[str, torch.Tensor] | Picked, mask: torch.Tensor, rows: int = 1,
                 bias: list | None = None, low: tuple[torch.Tensor, torch.Tensor] | None = None,
                 laid_out: tuple[bool, dict[str, torch.Tensor]] | None = None):
        self._keys = keys if isinstance(keys, Picked) else Picked(keys)
        self.mask, self.rows = mask, rows
        self._repeated: tuple[dict, torch.Tensor] | None = None
        self._low = low  # ``low()``'s, when a selection of the memory it was made for passes it on
        self._laid_out = laid_out  # ``laid_out()``'s (low, keys), passed on alike
        self._bias = [None] if bias is None else bias  # shared by the layers of one memory

    @property
    def keys(self) -> dict[str, torch.Tensor]:
        """The layer's float32 keys (E, H, S, ·) by name: ``Picked``, selected when first read."""
        return self._keys.get()

    def bias(self, dtype: torch.dtype) -> torch.Tensor:
        """The mask as SDPA's additive (E, 1, 1, S) bias (0 or -inf), made once per batch: what
        SDPA makes of a boolean mask at every call."""
        if self._bias[0] is None or self._bias[0].dtype != dtype:
            self._bias[0] = mask_bias(self.mask, dtype)[:, None, None, :]
        return self._bias[0]

    def low(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Kᵀ, V, K) as contiguous bfloat16 tensors (E, H, d, S), (E, H, S, d) and (E, H, S, d),
        made once per memory: the operands of a bfloat16 search's products and of SDPA (torch's
        bfloat16 kernels copy operands that are not contiguous, at every call)."""
        if self._low is None:
            k = self.keys["k"].to(torch.bfloat16)
            self._low = (k.transpose(2, 3).contiguous(), self.keys["v"].contiguous().to(torch.bfloat16),
                         k.contiguous())
        return self._low

    def laid_out(self, unit, low: bool = False) -> dict[str, torch.Tensor]:
        """The keys as the variant ``unit``'s products read them at every step, laid out once
        per memory (``unit.key_layout``: the same values, strides its products read without the
        copy torch's batched product makes of a strided operand at every call); ``low``: in
        bfloat16, for a bfloat16 search's products (``packed.bf16_products``), rounded once
        instead of at every step."""
        if self._laid_out is None or self._laid_out[0] != low:
            self._laid_out = (low, {n: unit.key_layout(n, t.to(torch.bfloat16) if low else t)
                                    for n, t in self.keys.items()})
        return self._laid_out[1]

    def low_context(self, queries: torch.Tensor, scale: float) -> torch.Tensor:
        """``attend``'s context in a bfloat16 search, before W_o: an entry's rows as one block of
        queries (E, H, rows, d_h) bfloat16 -> (E, H, rows, d_h) bfloat16. The scores and context
        as the search's other products, of bfloat16 operands (~0.6x SDPA's float32 time at 64
        sentences × 5 rows, 40 keys)."""
        k_t, v, k = self.low()
        if queries.size(0) <= FEW_ENTRIES:
            # a few sentences (a one-sentence request): SDPA's one call costs less than the
            # products' fixed costs (1 sentence × 5 rows, 30 keys: 18 against 78 µs; from ~8 on,
            # the products are ahead), and rounds alike (bfloat16 operands, float32 sums)
            return F.scaled_dot_product_attention(queries, k, v, attn_mask=self.bias(torch.bfloat16), scale=scale)
        scores = torch.matmul(queries, k_t).float().mul_(scale).add_(self.bias(torch.float32))
        return torch.matmul(torch.softmax(scores, dim=-1).to(torch.bfloat16), v)

    def repeated(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(keys, mask) with every entry repeated ``rows`` times: the definition's memory."""
        if self.rows == 1:
            return self.keys, self.mask
        if self._repeated is None:
            self._repeated = ({n: t.repeat_interleave(self.rows, 0) for n, t in self.keys.items()},
                              self.mask.repeat_interleave(self.rows, 0))
        return self._repeated

    def attend(self, attn, x: torch.Tensor, need_weights: bool, internals: dict | None, offset: int = 0):
        """``attn(x, keys, mask, q_offset=offset)`` (cross-attention, no causal mask) for x
        (entries·rows, T, D) at target positions offset..: standard attention's block of queries
        where ``dispatch.choose`` picks it (``CROSS``)."""
        unit = attn.definition
        if (self.rows == 1 or need_weights or internals is not None or x.size(1) != 1 or attn.training
                or unit.reads_query_positions):
            keys, mask = self.repeated()
            return attn(x, keys, mask, False, offset, need_weights, internals)
        if choose("search cross-attention", attn)[0] is not CROSS:
            # without a causal mask each query is attended on its own: an entry's rows, as one
            # block of queries against its keys, are the definition's rows over repeated keys
            E, D = x.size(0) // self.rows, x.size(2)
            low = bf16_search_on(attn, x)
            with packed.bf16_products(low):  # a bfloat16 search: the variant's products too
                out, _ = attn(x.view(E, self.rows, D), self.laid_out(unit, low), self.mask, False, 0, False, None)
            return out.view(E * self.rows, 1, D), None
        q = attn._split(attn.q(x))  # (E·rows, H, 1, d_h)
        E, H, d = q.size(0) // self.rows, q.size(1), q.size(3)
        q = q.view(E, self.rows, H, d).transpose(1, 2)  # (E, H, rows, d_h): an entry's rows as queries
        if bf16_search_on(attn, q):
            out = self.low_context(q.to(torch.bfloat16), attn.scale).float()
        else:
            out = F.scaled_dot_product_attention(q, self.keys["k"], self.keys["v"],
                                                 attn_mask=self.bias(q.dtype))
        return attn.o(out.transpose(1, 2).reshape(E * self.rows, 1, H * d)), None


class SharedMemory:
    """The Transformer's encoder output for a search (``encode``'s dict: ``out``, ``mask``,
    ``cross``, read alike), whose entries beam search repeats (``repeat_rows``) and selects
    (``select``) without copying them: each layer's cross keys a ``SharedKeys``. A selection of
    whole aligned blocks of ``rows`` rows (a beam search dropping finished sentences) keeps the
    entries shared; any other selection reads entry index // rows, one row each."""

    def __init__(self, out: torch.Tensor | Picked, mask: torch.Tensor, cross: list[dict[str, torch.Tensor] | Picked],
                 rows: int = 1, lows: list | None = None, laid: list | None = None):
        self._out = out if isinstance(out, Picked) else Picked({"out": out})
        self._cross = [keys if isinstance(keys, Picked) else Picked(keys) for keys in cross]
        self.mask, self.rows = mask, rows
        bias: list = [None]
        lows, laid = lows or [None] * len(cross), laid or [None] * len(cross)
        self.cross = [SharedKeys(keys, mask, rows, bias, low, made)
                      for keys, low, made in zip(self._cross, lows, laid)]

    @property
    def out(self) -> torch.Tensor:
        return self._out.get()["out"]

    @property
    def cross_keys(self) -> list[dict[str, torch.Tensor]]:
        return [keys.get() for keys in self._cross]

    def __getitem__(self, name: str):
        return {"out": self.out, "mask": self.mask, "cross": self.cross}[name]

    def _lows(self) -> list:
        return [keys._low for keys in self.cross]

    def _laid(self) -> list:
        return [keys._laid_out for keys in self.cross]

    def repeat_rows(self, k: int) -> SharedMemory:
        return SharedMemory(self._out, self.mask, self._cross, self.rows * k, self._lows(), self._laid())

    def _entries(self, entries: torch.Tensor, rows: int) -> SharedMemory:
        """Entries ``entries`` of everything, the bfloat16 and laid-out keys too where they were
        made (a selection along the first axis keeps a contiguous tensor contiguous, and
        ``_pick_keeping_layout`` a laid-out one in its layout: not made again after every
        sentence that leaves the batch)."""
        pick = lambda t: t.index_select(0, entries)  # noqa: E731
        lows = [None if low is None else tuple(pick(t) for t in low) for low in self._lows()]
        laid = []
        for made in self._laid():
            picked = None if made is None else {n: _pick_keeping_layout(t, entries) for n, t in made[1].items()}
            laid.append(None if picked is None or any(t is None for t in picked.values()) else (made[0], picked))
        return SharedMemory(self._out.pick(entries), pick(self.mask), [keys.pick(entries) for keys in self._cross],
                            rows, lows, laid)

    def select(self, index: torch.Tensor) -> SharedMemory:
        if self.rows > 1 and index.numel() % self.rows == 0:
            blocks = index.view(-1, self.rows)
            starts = blocks[:, :1]
            aligned = bool(((blocks == starts + torch.arange(self.rows, device=index.device)).all()
                            & (starts % self.rows == 0).all()))
            if aligned:
                return self._entries(starts.squeeze(1) // self.rows, self.rows)
        return self._entries(index // self.rows, 1)


def _pick_keeping_layout(t: torch.Tensor, entries: torch.Tensor) -> torch.Tensor | None:
    """``t.index_select(0, entries)`` in ``t``'s own memory layout (a dense tensor whose axes are
    stored in some order, e.g. ``Variant.key_layout``'s Kᵀ under a (B, H, S, d) view); None
    where ``t`` is no such tensor. index_select itself returns the result contiguous in its
    logical shape, which the variant's products would then copy at every step."""
    order = sorted(range(t.dim()), key=lambda i: t.stride(i), reverse=True)  # outermost axis first
    stored = t.permute(order)
    if not stored.is_contiguous():
        return None
    picked = stored.index_select(order.index(0), entries)
    return picked.permute([order.index(i) for i in range(t.dim())])


def buffers(layers: int) -> list[KVBuffer]:
    """The empty search state of a decoder of ``layers`` layers."""
    return [KVBuffer() for _ in range(layers)]


KERNELS = (Kernel("kv_cache.KVBuffer", "search keys", "attnmt.models.transformer.Layer",
                  "every attention variant (its extra keys are buffered alike)",
                  lambda layer: (True, ""), ("cpu", "cuda"), KVBuffer),
           Kernel("kv_cache.SharedKeys", "search memory", "attnmt.models.transformer.Transformer",
                  "every variant that does not read query positions, without weights (else: the keys repeated once per state)",
                  lambda model: (True, ""), ("cpu", "cuda"), SharedKeys),
           Kernel("kv_cache.one_query_attention", "search self-attention", "attnmt.attention.variant.Variant",
                  "standard attention in a CPU search, one query per row, no internals",
                  lambda unit: (True, ""), ("cpu",), one_query_attention),
           Kernel("kv_cache.SharedKeys.attend", "search cross-attention", "attnmt.attention.variant.Variant",
                  "standard attention, without weights: a sentence's rows as one block of queries against its keys "
                  "(SDPA; a bfloat16 search's products, SharedKeys.low_context)",
                  lambda unit: (True, ""), ("cpu", "cuda"), None))
ONE_QUERY, CROSS = KERNELS[2], KERNELS[3]  # standard attention's steps (transformer_search takes them inline)
