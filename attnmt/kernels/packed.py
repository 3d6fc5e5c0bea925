"""Linear maps with weights pre-packed for oneDNN, for the CPU step loops.

A step loop multiplies small row blocks (a batch of 64 rows in training, 5 × 64 beam rows in
search) by the same weight matrix at every step. A plain ``addmm`` re-lays the weight out for its
kernel on every call; oneDNN can do that once (``torch.ops.mkldnn._reorder_linear_weight``) and
reuse the packed copy for every step (``torch.ops.mkldnn._linear_pointwise``), which on an AVX2
CPU is 10–40 % faster at these shapes. Small products (one or two rows, as in greedy search at
batch 1, or few multiply-adds) skip it: its call costs more than their arithmetic. Where oneDNN
is missing (other builds, float64, GPUs) ``pack`` returns the plain weight and ``linear`` falls
back to ``F.linear``: same results up to float rounding.

``pack_int8`` / ``linear`` with an int8 weight: the product in 8-bit integers (torch's dynamic
quantised linear on oneDNN's engine, which rounds the input and multiplies in one call), for a
search's per-step products (``attnmt translate --int8``). The weight is rounded per output row
(scale max|w_row| / 127); the input is rounded per call to 7 bits over its own range: AVX2's
u8·s8 kernels add products in pairs into 16 bits, which 8-bit inputs can overflow. At a beam
search's 320 rows, d 256, one thread of an AVX-512 VNNI core (AMD EPYC): 1.6-1.9x the bfloat16
rate (the 768 × 256 Q/K/V product 0.37 against 0.62 ms, an 8,000-word output layer 3.5 against
6.9 ms).

``PackedLinear``: an nn.Linear whose products go through this module (``product`` with autograd,
its packed weight through ``linear`` without): the Transformer's projections, feed-forward and
output layer.

``bf16_products``: while on (the trainer turns it on for ``train.amp`` on a CPU that multiplies
bfloat16 natively, see ``native_bf16``), ``pack`` / ``linear`` / ``product`` / ``mm`` / ``matmul``
round their operands to bfloat16 and return float32: the products of training (per-step
recurrences, input projections, weight gradients, the output layer, attention's scores and
contexts) run on the CPU's bfloat16 units (AMX: ~2.5x the
float32 rate at the race's shapes), while states, gates, softmaxes and the parameters and their
optimizer stay in float32, as CUDA autocast keeps them.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.kernels.cache import derived
from attnmt.kernels.dispatch import Kernel
from attnmt.kernels.padded_rows import low_rows, rounded_product

# the definitions this module computes faster: x Wᵀ + b (PackedLinear: nn.Linear), and the
# Transformer's feed-forward W_2 ReLU(W_1 x) in a search (relu_chain)
IMPLEMENTS = ("torch.nn.Linear", "torch.nn.functional.linear", "attnmt.models.transformer.FeedForward")

_MKLDNN = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)
INT8 = (
    torch.backends.mkldnn.is_available()
    and "onednn" in torch.backends.quantized.supported_engines
    and hasattr(torch.ops.quantized, "linear_prepack")
    and hasattr(torch.ops.quantized, "linear_dynamic")
)


_bf16 = False  # bf16_products: round the operands of products to bfloat16


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX) and oneDNN uses it.
    Elsewhere (e.g. AVX2 only) bfloat16 products are emulated and far slower than float32."""
    cpu = torch.cpu
    try:
        has = cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported()
    except AttributeError:  # older torch: no way to tell, so no
        return False
    return bool(has and _MKLDNN and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def amx_tiles() -> bool:
    """Whether this CPU has AMX tiles: torch's bfloat16 kernels that call oneDNN's small products
    (e.g. ``scaled_dot_product_attention``'s) then multiply on them, else on vector units."""
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch: no way to tell, so no
        return False


@contextmanager
def bf16_products(on: bool = True):
    """Within the block, the products of this module take bfloat16 operands (float32 results)."""
    global _bf16
    before, _bf16 = _bf16, bool(on)
    try:
        yield
    finally:
        _bf16 = before


def set_bf16_products(on: bool) -> None:
    """bf16_products for the rest of the process (and of processes forked from it)."""
    global _bf16
    _bf16 = bool(on)


def bf16_enabled() -> bool:
    return _bf16


def _rounds(x: torch.Tensor) -> bool:
    return _bf16 and x.dtype == torch.float32 and x.device.type == "cpu"


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b of two matrices; with bf16 products on, of their bfloat16 roundings (float32 result)."""
    if _bf16 and a.device.type == "cpu" and a.dtype in (torch.float32, torch.bfloat16):
        return torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16)).float()
    return a @ b


def operand(x: torch.Tensor) -> torch.Tensor:
    """x as a product's operand: its bfloat16 rounding while bf16 products are on (for a float32
    CPU tensor), else x. Lets a caller round once what it stacks into one operand; ``matmul``
    takes it and returns float32."""
    return x.to(torch.bfloat16) if _rounds(x) else x


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (batched: attention's scores and contexts) with autograd; with bf16 products on, of
    their bfloat16 roundings (their gradients too), float32 result: on AVX-512 BF16 2-3x the
    float32 rate at attention's shapes (272 × 29 × 64 by 64 × 29: 0.23 against 0.69 ms)."""
    if _rounds(a) or (_bf16 and a.dtype == torch.bfloat16 and a.device.type == "cpu"):
        return torch.matmul(a.to(torch.bfloat16), b.to(torch.bfloat16)).float()
    return a @ b


def einsum(equation: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.einsum(equation, a, b)`` with autograd; with bf16 products on, of their bfloat16
    roundings, float32 result, as ``matmul`` (the window's per-head pointer maps: (70·29) × 64 by
    64 × 128 for 4 heads with its backward, 3.1 → 1.7 ms on 2 threads)."""
    if _rounds(a):
        return torch.einsum(equation, a.to(torch.bfloat16), b.to(torch.bfloat16)).float()
    return torch.einsum(equation, a, b)


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, W, b) with autograd; with bf16 products on, x Wᵀ of bfloat16 roundings (its
    gradients too) plus b in float32."""
    if _rounds(x):  # rows padded so that oneDNN's compiled kernel repeats (kernels/padded_rows.py)
        y = rounded_product(x, weight)[0]
        return y if bias is None else y + bias
    return F.linear(x, weight, bias)


def products(x: torch.Tensor, linears: tuple[nn.Linear, ...] | list[nn.Linear], low: int = 0) -> list[torch.Tensor]:
    """``[lin(x) for lin in linears]`` as one product of their weights stacked (out_1 + out_2 +
    ..., in): one larger product instead of several, x rounded once where products take
    bfloat16. With autograd: ``product`` of the stacked weights; ``low``: the last ``low`` maps'
    results are only ever operands of this module's products (a window's pointer and local maps),
    so while products take bfloat16 they come back in bfloat16, their bias added there
    (x Wᵀ + b rounded once, as the product that reads them would round them): no float32 copy
    made, converted back and, in the backward, concatenated. Without (a search, validation)
    on the CPU: ``linear`` of the stacked weights packed once (kept by kernels/cache.py on the
    first map, in the maps' ``bf16_search`` precision). The results are views of the one output
    (last dimension split). Elsewhere (the maps are no plain PackedLinear of float32 weights
    with biases, or differ in precision) the maps one by one."""
    if not all(type(lin) is PackedLinear and lin.weight.dtype == x.dtype and lin.bias is not None
               for lin in linears):
        return [lin(x) for lin in linears]
    sizes = [lin.out_features for lin in linears]
    if torch.is_grad_enabled():
        weight = torch.cat([lin.weight for lin in linears])
        bias = torch.cat([lin.bias for lin in linears])
        if _rounds(x):  # pieces of one padded bfloat16 product, their gradients written into one block
            return _rounded_products(x, weight, bias, sizes, low)
        return list(product(x, weight, bias).split(sizes, dim=-1))
    low, int8 = linears[0].bf16_search, bool(linears[0].int8_search and INT8)
    if (not _MKLDNN or x.device.type != "cpu" or x.dtype != torch.float32
            or any(bool(lin.int8_search and INT8) != int8 or lin.bf16_search != low for lin in linears)):
        return [lin(x) for lin in linears]
    w, bias = stacked(linears)
    return list(linear(x, w, bias).split(sizes, dim=-1))


def _rounded_products(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, sizes: list[int],
                  low: int) -> list[torch.Tensor]:
    """``products`` with autograd under bfloat16 products: the first maps' results as ``product``
    makes them (float32, bias added in float32), the last ``low`` maps' in bfloat16; no
    concatenation of the pieces' gradients (``padded_rows.RoundedProduct``)."""
    first = len(sizes) - low
    pieces = rounded_product(x, weight, sizes, first)  # float32, then bfloat16 pieces
    return [y + (b if i < first else b.to(torch.bfloat16)) for i, (y, b) in enumerate(zip(pieces, bias.split(sizes)))]


def stacked(linears: tuple[PackedLinear, ...] | list[PackedLinear]) -> tuple[Packed, torch.Tensor]:
    """The maps' weights and biases stacked and packed for ``linear`` in the first map's search
    precision (``products`` without autograd; the maps PackedLinear with biases, all of one
    precision), kept by kernels/cache.py."""
    low, int8 = linears[0].bf16_search, bool(linears[0].int8_search and INT8)
    sources = [t for lin in linears for t in (lin.weight, lin.bias)]
    # kept on the first map under the count: project_self stacks on W_q its 3 maps + a variant's
    # key-side maps (+ its query-side ones while the variant is on): different counts. The entry's
    # key holds every stacked tensor's pointer and version, so another set of the same count on
    # the same first map is packed again, never read stale.
    return derived(linears[0], f"stacked_{len(linears)}", sources, lambda: _stacked(linears, low, int8),
                   (low, int8))


def _stacked(linears, low: bool, int8: bool = False) -> tuple[Packed, torch.Tensor]:
    """The maps' weights and biases stacked, packed for ``linear`` (``products`` without autograd)."""
    bias = torch.cat([lin.bias.detach() for lin in linears])
    weight = torch.cat([lin.weight.detach() for lin in linears])
    if int8:
        return pack_int8(weight, 320, bias), bias
    return pack(weight, 320, low, few_rows=True, bias=bias), bias


@dataclass
class Packed:
    """A weight (out, in) ready for ``linear``, and the plain weight it was made from."""

    weight: torch.Tensor
    packed: torch.Tensor | None  # oneDNN's layout, or None: use ``weight``
    int8: tuple[object, torch.Tensor | None] | None = None  # (oneDNN's prepacked int8 weight, its bias)
    low_bias: tuple[torch.Tensor, torch.Tensor] | None = None  # (the bias, its bfloat16 rounding)


def pack(
    weight: torch.Tensor, rows: int = 64, bf16: bool | None = None, few_rows: bool = False,
    bias: torch.Tensor | None = None,
) -> Packed:
    """Pack ``weight`` (out, in) for products with blocks of about ``rows`` rows; in bfloat16
    if ``bf16`` (None: as ``bf16_products`` says). The packed copy is a snapshot: pack again
    after the weight changes.

    ``few_rows``: products of one or two rows will come too (a search at batch 1), which skip
    oneDNN (``SMALL_PRODUCT``). In float32 the plain weight is then kept as a view of its
    transpose, (in, out) contiguous: ``F.linear``'s one-row product reads that layout several
    times faster inside a search (greedy search at batch 1, S = 200, an 8,000-word output
    layer: 1.4-1.7x less time per word on an AMD EPYC, docs/RESULTS.md). It costs a copy of
    the weight. ``bias``: the bias ``linear`` will be given with the packed weight, rounded to
    bfloat16 here once when the weight is (not at every call)."""
    weight = weight.detach()
    if _MKLDNN and weight.device.type == "cpu" and weight.dtype == torch.float32:
        low = _bf16 if bf16 is None else bf16
        plain = (weight.to(torch.bfloat16) if low else weight).contiguous()
        kept = weight.t().contiguous().t() if few_rows and not low else weight
        low_bias = (bias, bias.detach().to(torch.bfloat16)) if low and bias is not None else None
        return Packed(kept, torch.ops.mkldnn._reorder_linear_weight(plain, rows), low_bias=low_bias)
    return Packed(weight, None)


def pack_int8(weight: torch.Tensor, rows: int = 64, bias: torch.Tensor | None = None) -> Packed:
    """``weight`` (out, in) as int8 rows q with scales s (W ≈ diag(s) q), prepacked with ``bias``
    for oneDNN's quantised product (CPU, float32 weights; see INT8). ``rows`` is unused (oneDNN
    packs for any), kept for the callers of ``pack``."""
    weight = weight.detach()
    if not INT8 or weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError("int8 products need torch's oneDNN quantised linear on CPU, float32 weights")
    scale = (weight.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    zero = torch.zeros(weight.size(0), dtype=torch.long)
    engine = torch.backends.quantized.engine
    with warnings.catch_warnings():  # quantised tensors are deprecated, with no successor on CPU yet
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(weight, scale.double(), zero, 0, torch.qint8)
        try:  # the packed weight keeps its engine's kernel, whatever the engine at call time
            torch.backends.quantized.engine = "onednn"
            params = torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach())
        finally:
            torch.backends.quantized.engine = engine
    return Packed(weight, None, (params, bias))


def _linear_int8(x: torch.Tensor, w: Packed, bias: torch.Tensor | None) -> torch.Tensor:
    """x Wᵀ + b through 8-bit integers: x rounded to 7-bit steps over [min(x, 0), max(x, 0)]."""
    params, packed_bias = w.int8
    flat = x.reshape(-1, x.size(-1))
    try:
        y = torch.ops.quantized.linear_dynamic(flat, params, True)
    except RuntimeError:  # no finite range to round over (NaN or inf in x): the float product
        return F.linear(x, w.weight, bias)
    if bias is not packed_bias:  # not the bias it was packed with (the product added that one)
        y = y if packed_bias is None else y - packed_bias
        y = y if bias is None else y + bias
    return y.view(*x.shape[:-1], y.size(-1))


# products of at most this many multiply-adds, or of one or two rows, skip oneDNN: its call
# costs ~20 µs whatever the size (a greedy search step at batch 1 makes four of them), a plain
# product of the same one row 1.1-3x less; measured on an AVX-512 Xeon, 1 thread (H = 256:
# [W_ih | W_hh] 1.5x, W_c 2x, an 8,000-word W_s 1.2x per row; from 5 rows on, oneDNN is ahead
# for the large weights)
SMALL_PRODUCT = 1 << 20
SEARCH_ROWS = 16  # a search's bfloat16 products: rows rounded up to a multiple of this (AMX's tile
#                  height), of 8 times it from 512 rows on (an encoder's batch)


def _small(x: torch.Tensor, w: Packed) -> bool:
    rows = x.numel() // x.size(-1)
    return rows <= 2 or x.numel() * w.weight.size(0) <= SMALL_PRODUCT


def linear(x: torch.Tensor, w: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ + b for x (..., in); no autograd (the packed copy is not a parameter)."""
    if w.int8 is not None:
        return _linear_int8(x, w, bias)
    if w.packed is not None and w.packed.dtype == torch.float32 and _small(x, w):
        return F.linear(x, w.weight, bias)
    if w.packed is not None and w.packed.dtype == torch.bfloat16 and x.dtype == torch.float32:
        return linear_low(x, w, bias).float()
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise(x, w.packed, bias, "none", [], "")
    return F.linear(x, w.weight, bias)


def linear_low(x: torch.Tensor, w: Packed, bias: torch.Tensor | None = None, post: str = "none") -> torch.Tensor:
    """x Wᵀ + b as bfloat16, for x (..., in) float32 or bfloat16 and ``w`` packed in bfloat16:
    what ``linear`` returns before its conversion to float32 (oneDNN rounds the float32 sums once
    into its bfloat16 result, so ``linear`` of the same x is this, converted exactly). For a
    caller whose next product rounds that result to bfloat16 again (kernels/transformer_search.py).
    ``post``: oneDNN's post-op on the sums ("relu")."""
    # the bias joins the product (oneDNN adds it to the float32 sums before the one rounding of
    # the result): adding it afterwards in float32 was a whole extra pass over the output, ~1 ms
    # a search step for the output layer of 320 hypotheses × 8,000 words
    if bias is None:
        b = None
    elif w.low_bias is not None and w.low_bias[0] is bias:  # the bias it was packed with
        b = w.low_bias[1]
    else:
        b = bias.to(torch.bfloat16)
    rows = x.numel() // x.size(-1)
    multiple = SEARCH_ROWS if rows < 512 else 8 * SEARCH_ROWS
    if rows <= SEARCH_ROWS or rows % multiple == 0:
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), w.packed, b, post, [], "")
    # a search's row count (5 × the sentences still searched; a batch's source tokens in the
    # encoder) changes as sentences end and from batch to batch: rounded up (zero rows, cut from
    # the result) so that oneDNN's kernel compiled for it repeats (kernels/padded_rows.py says why)
    padded = low_rows(x, multiple)
    out = torch.ops.mkldnn._linear_pointwise(padded, w.packed, b, post, [], "")[:rows]
    return out.view(*x.shape[:-1], out.size(-1))


def relu_chain(x: torch.Tensor, first: PackedLinear, second: PackedLinear) -> torch.Tensor | None:
    """``second(relu(first(x)))`` in a search's bfloat16 products (no autograd, the CPU, both maps
    ``bf16_search`` and not int8; None elsewhere): the ReLU fused into the first product
    (oneDNN's post-op) and the hidden layer left in bfloat16 for the second. The same numbers as
    the maps one by one: each rounds its input to bfloat16 anyway, and rounding keeps signs, so
    ReLU before or after it is the same; two conversions of the (rows, ff) hidden layer and a
    pass of ReLU saved (a Transformer decoder's feed-forward at every search step). Not for
    int8 maps: torch 2.13's ``quantized::linear_relu_dynamic`` on oneDNN's engine returns the
    product without the ReLU."""
    if (torch.is_grad_enabled() or not _MKLDNN or x.device.type != "cpu" or x.dtype != torch.float32
            or type(first) is not PackedLinear or type(second) is not PackedLinear
            or first.weight.dtype != torch.float32 or second.weight.dtype != torch.float32):
        return None
    if not (first.bf16_search and second.bf16_search) or first.int8_search or second.int8_search:
        return None
    w1, w2 = first._packed(), second._packed()
    if w1.packed is None or w2.packed is None or w1.packed.dtype != torch.bfloat16:
        return None
    return linear_low(linear_low(x, w1, first.bias, "relu"), w2, second.bias).float()


def linear_add(x: torch.Tensor, w: Packed, other: torch.Tensor) -> torch.Tensor:
    """x Wᵀ + other, with ``other`` of the result's shape (oneDNN adds it in the same pass)."""
    if x.dim() == 2 and (w.packed is None or w.packed.dtype == torch.float32) and _small(x, w):
        return torch.addmm(other, x, w.weight.t())
    if w.packed is not None and w.packed.dtype == torch.bfloat16:
        return linear(x, w).add_(other)  # the sum in float32
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, w.packed, None, "add")
    return torch.addmm(other, x, w.weight.t()) if x.dim() == 2 else F.linear(x, w.weight) + other


class PackedLinear(nn.Linear):
    """nn.Linear that multiplies through this module. With autograd it is ``product``: bfloat16
    operands while ``bf16_products`` is on (``train.amp`` on a CPU with bfloat16 units: 400
    updates of a 3-layer, 256-wide Transformer took 0.60-0.63x float32's time, dev perplexity
    0.1-1.1 % higher at equal updates; docs/RESULTS.md). Without autograd on the CPU (a
    search's steps, validation) it takes ``pack``'s copy of the weight through ``linear``: one-
    and two-row products on its transposed copy, larger ones through oneDNN, and every one in
    bfloat16 when ``bf16_search`` is set (``attnmt translate --bf16``). ``attnmt translate`` of
    the Bible test set with that Transformer (beam 5, batch 64, an AMD EPYC) took 1.4-1.7x less
    time in float32 than with nn.Linear, with the same output, and 1.6-2.0x less in bfloat16
    (docs/RESULTS.md). With ``int8_search`` (``translate --int8``: every map of a Transformer)
    the product is ``pack_int8``'s. On a GPU and in
    other dtypes it is nn.Linear.

    The packed copy is kept by kernels/cache.py (per weight version, dropped when the module
    enters or leaves training: torch's fused Adam updates parameters without bumping versions)."""

    bf16_search = False
    int8_search = False  # ``attnmt translate --int8``: the search's product through ``pack_int8``

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return product(x, self.weight, self.bias)
        if (not _MKLDNN or x.device.type != "cpu" or x.dtype != torch.float32
                or self.weight.dtype != torch.float32):
            return F.linear(x, self.weight, self.bias)
        return linear(x, self._packed(), self.bias)

    def _packed(self) -> Packed:
        if self.int8_search and INT8:
            sources = (self.weight,) if self.bias is None else (self.weight, self.bias)
            return derived(self, "packed_weight", sources, lambda: pack_int8(self.weight, 320, self.bias),
                           ("int8",))
        sources = (self.weight,) if self.bias is None else (self.weight, self.bias)
        return derived(self, "packed_weight", sources,
                       lambda: pack(self.weight, 320, self.bf16_search, few_rows=True, bias=self.bias),
                       (self.bf16_search,))


KERNELS = (Kernel("packed.PackedLinear", "linear maps", "attnmt.kernels.packed.PackedLinear",
                   "float32 weights", lambda linear: (True, ""), ("cpu",), PackedLinear),
           Kernel("packed.relu_chain", "feed-forward search", "attnmt.models.transformer.FeedForward",
                  "a search's bfloat16 products (elsewhere the maps one by one)", lambda ff: (True, ""),
                  ("cpu",), relu_chain))
