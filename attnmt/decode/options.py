"""``SearchOptions``: every setting of a search, in one object, checked in one place.

``attnmt translate``, ``attnmt serve`` and ``attnmt.load(...).translate`` build one and the
``Translator`` reads it (decode/translate.py); nothing else checks a search setting. ``validate``
raises a ``UserError`` naming the option (spelled the way the caller's user wrote it: ``--beam`` on
the command line, ``beam`` in a request or a Python call) and the reason for every bound:

    beam ≤ 1000                each step scores beam × vocabulary extensions per sentence
    nbest ≤ beam               a beam of K holds at most K finished hypotheses
    workers ≤ 4 × CPUs         more threads than that only wait for a core
    0.1 ≤ max_len_ratio ≤ 100  output pieces per source piece: below, outputs stop after
                               ``max_len_extra`` pieces whatever the source; above, the cap decides
    0 ≤ length_penalty ≤ 10    rank by log p(y|x) / |y|^α: beyond 10 the length swamps the score
    1 ≤ max_len_cap ≤ 100000   output pieces of one line, a search step each
    1 ≤ batch_size ≤ 10000     sentences in one search
    0.01 ≤ temperature ≤ 100   sampling from softmax(logits / T); below, the logits overflow

The output length of a line is min(max_len_cap, ⌈max_len_ratio · |x|⌉ + max_len_extra) pieces,
raised to fit a forced prefix and constraints. An output that stops at ``max_len_cap`` is not a
translation: ``at_cap="error"`` (the default) makes it a UserError naming the line, ``"keep"``
returns it cut. A blank source line (whitespace only) is not decoded under ``blank="skip"``: it
gets no hypotheses (``[]``); ``blank="decode"`` searches it as an empty source.

These defaults are the command line's, the server's and the Python API's alike: each builds its
options from ``SearchOptions()`` and changes only what its user asked for, so the same input gives
the same output through every door (tests/test_front_doors.py). ``precision="auto"`` is decided by
the ``Translator`` and reported with each result (``Translation.precision``, the server's
``precision`` field, a line on translate's stderr).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from attnmt.errors import UserError

BEAM_LIMIT = 1000
WORKERS_PER_CPU = 4
RATIO_RANGE = (0.1, 100.0)
LENGTH_PENALTY_LIMIT = 10.0
CAP_LIMIT = 100_000
EXTRA_LIMIT = 10_000
BATCH_LIMIT = 10_000
TOPK_LIMIT = 1_000_000
TEMPERATURE_RANGE = (0.01, 100.0)
SEED_LIMIT = 2**63
STOPS = ("best", "complete")
PRECISIONS = ("auto", "bf16", "float32")
BLANKS = ("skip", "decode")
AT_CAP = ("error", "keep")
SAMPLE_KINDS = ("topk", "topp")


def workers_limit() -> int:
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


@dataclass(frozen=True)
class SearchOptions:
    """How to search. Frozen and hashable: the server batches requests with equal options."""

    beam: int = 5  # 1 = greedy search
    nbest: int = 1  # hypotheses returned per line, best first (≤ beam)
    length_penalty: float = 1.0  # α: finished hypotheses rank by log p(y|x) / |y|^α
    max_len_ratio: float = 2.0
    max_len_extra: int = 10
    max_len_cap: int = 512
    stop: str = "best"  # beam: done when the best extension ends, or when K are finished
    at_cap: str = "error"  # an output cut at max_len_cap: a UserError, or kept as it is
    blank: str = "skip"  # blank source lines: not decoded (no hypotheses), or decoded
    batch_size: int = 32
    workers: int = 0  # batches searched at once, one CPU thread each; 0: one per torch thread
    with_attention: bool = False  # attention matrices and word alignments in the results
    # "auto": bfloat16 products where the CPU has bfloat16 units and the model is an LSTM decoder
    # or a Transformer, else float32 (decode/translate.py, ``set_search_precision``): the one
    # default of attnmt translate, attnmt serve and attnmt.load(...).translate; "bf16",
    # "float32" force one; None leaves the models as they are (training's validation)
    precision: str | None = "auto"
    int8: bool = False  # the output layer (Transformer: and decoder feed-forward) in 8 bits (CPU)
    sample: str | None = None  # "topk=K" or "topp=P": sample instead of beam search
    temperature: float = 1.0  # sampling: softmax(logits / T)
    seed: int | None = None  # sampling: same seed, input and batch_size → same outputs

    def validate(self, spell: Callable[[str], str] = lambda name: name) -> SearchOptions:
        """``self`` if every setting is in range, else a UserError naming the first one that is
        not (``spell(field)``: how the caller's user names it, e.g. ``--max-len-ratio``)."""

        def fail(name: str, why: str) -> None:
            raise UserError(f"{spell(name)} {why}")

        def whole(name: str, low: int, high: int, reason: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                fail(name, f"must be a whole number, got {value!r}")
            if value < low:
                fail(name, f"{value} is below the minimum {low}")
            if value > high:
                fail(name, f"{value} is above the limit {high} ({reason})")

        def real(name: str, low: float, high: float, reason: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                fail(name, f"must be a finite number, got {value!r}")
            if value < low:
                fail(name, f"{value:g} is below the minimum {low:g} ({reason})")
            if value > high:
                fail(name, f"{value:g} is above the limit {high:g} ({reason})")

        def choice(name: str, allowed: tuple, none_ok: bool = False) -> None:
            value = getattr(self, name)
            if not (value is None and none_ok) and value not in allowed:
                fail(name, f"must be one of {', '.join(allowed)}, got {value!r}")

        whole("beam", 1, BEAM_LIMIT, "each step scores beam × vocabulary extensions per sentence")
        whole("nbest", 1, self.beam, "a beam holds at most beam finished hypotheses; raise "
              f"{spell('beam')}")
        real("length_penalty", 0.0, LENGTH_PENALTY_LIMIT,
             "scores are log p / length^alpha; beyond it the length swamps the score")
        real("max_len_ratio", *RATIO_RANGE, "output pieces allowed per source piece")
        whole("max_len_extra", 0, EXTRA_LIMIT, "output pieces allowed beyond the ratio")
        whole("max_len_cap", 1, CAP_LIMIT, "output pieces of one line, one search step each")
        whole("batch_size", 1, BATCH_LIMIT, "sentences searched together, in memory at once")
        whole("workers", 0, workers_limit(), f"{WORKERS_PER_CPU} threads per CPU; more only wait")
        choice("stop", STOPS)
        choice("at_cap", AT_CAP)
        choice("blank", BLANKS)
        choice("precision", PRECISIONS, none_ok=True)
        for flag in ("with_attention", "int8"):
            if not isinstance(getattr(self, flag), bool):
                fail(flag, f"must be true or false, got {getattr(self, flag)!r}")
        real("temperature", *TEMPERATURE_RANGE, "sampling divides the logits by it; use "
             f"{spell('sample')} topk=1 for the most likely output")
        if self.seed is not None:
            whole("seed", 0, SEED_LIMIT - 1, "a 64-bit random seed")
        if self.sample is not None:
            self.sampling(spell)  # parses or raises
            if self.nbest > 1:
                fail("nbest", f"{self.nbest} needs beam search; {spell('sample')} draws one output per line")
        return self

    def sampling(self, spell: Callable[[str], str] = lambda name: name) -> tuple[str, float] | None:
        """``("topk", K)`` or ``("topp", P)`` from ``sample``, or None for beam/greedy search."""
        if self.sample is None:
            return None
        kind, sep, text = str(self.sample).partition("=")
        if not sep or kind not in SAMPLE_KINDS:
            raise UserError(f"{spell('sample')} must be topk=K or topp=P, got {self.sample!r}")
        try:
            value = int(text) if kind == "topk" else float(text)
        except ValueError:
            what = "a whole number" if kind == "topk" else "a number"
            raise UserError(f"{spell('sample')} {kind}= needs {what}, got {text!r}") from None
        if kind == "topk" and not 1 <= value <= TOPK_LIMIT:
            raise UserError(f"{spell('sample')} topk={value} must be between 1 and {TOPK_LIMIT}")
        if kind == "topp" and not (math.isfinite(value) and 0 < value <= 1):
            raise UserError(f"{spell('sample')} topp={text} must be a probability in (0, 1]")
        return kind, value

    def with_(self, spell: Callable[[str], str] = lambda name: name, **changes) -> SearchOptions:
        """A copy with ``changes`` (field names; a misspelt one is a UserError), validated. A
        change that would do nothing is refused too, naming it (``spell``): ``beam`` > 1,
        ``length_penalty`` or ``stop`` with ``sample`` (a sample draws one token a step and is one
        hypothesis), ``temperature`` or ``seed`` without it."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise UserError(f"unknown search option {unknown[0]!r}; the options are "
                            f"{', '.join(sorted(names))}")
        new = replace(self, **changes).validate(spell)
        if new.sample is not None and changes.get("beam", 1) > 1:
            raise UserError(f"{spell('beam')} {changes['beam']} has no effect with {spell('sample')}: "
                            f"sampling draws one token a step, not a beam; leave {spell('beam')} out")
        if new.sample is not None:
            for name in ("length_penalty", "stop"):  # they rank and end a beam's hypotheses
                if name in changes:
                    raise UserError(f"{spell(name)} has no effect with {spell('sample')} (it ranks a "
                                    "beam's hypotheses; a sample is one)")
        if new.sample is None:
            for name in ("temperature", "seed"):
                if changes.get(name) is not None:
                    raise UserError(f"{spell(name)} needs {spell('sample')} (it has no effect on a "
                                    "beam or greedy search)")
        return new


def check_precision_flags(bf16: bool, float32: bool) -> None:
    """``--bf16`` with ``--float32`` is a UserError (checked before a model loads)."""
    if bf16 and float32:
        raise UserError("--bf16 and --float32 exclude each other")


def cli_flag(name: str) -> str:
    """A SearchOptions field as ``attnmt translate`` spells it (``max_len_ratio`` → ``--max-len-ratio``)."""
    return "--" + name.replace("_", "-")
