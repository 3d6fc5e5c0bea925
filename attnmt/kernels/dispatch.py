"""Which kernel computes which part of a model: every kernel declares what it implements, and a
model's parts are matched against those declarations, never found by probing a module's
attributes (a new attention then takes the reference path silently).

A ``Kernel`` names its ``part`` (the role it plays: "decoder loop", "attention steps", ...), the
definition it ``implements`` (a class of attention/ or models/, as text: kernels import no
definitions) with the settings it covers, the devices it runs on, and ``supports(module) ->
(bool, reason)``. Each kernel module lists its kernels in ``KERNELS``; ``choose(part, module)``
takes the first that supports the module. ``paths(model, device)`` is what a run records (the
trainer's ``paths`` line in log.jsonl, translate's log): for each part of the model its kernel,
or "reference" and why; ``fallbacks`` are the lines ``attnmt train`` / ``translate`` print once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

IMPLEMENTS = ()  # no definition: the registry

# the kernel modules that declare KERNELS
MODULES = ("lstm_steps", "attention_steps", "local_decoding", "fused_loss", "fused_rnn", "packed", "kv_cache",
           "transformer_search", "window_search")


@dataclass(frozen=True)
class Kernel:
    name: str  # module.function of the kernel, e.g. "fused_rnn.input_feeding_loop"
    part: str  # the role it computes, e.g. "decoder loop"
    implements: str  # the definition's qualified class name
    covers: str  # the settings it covers, in words, e.g. "score dot, general or location"
    supports: Callable[[Any], tuple[bool, str]]  # (applies to this module, why not)
    devices: tuple[str, ...] = ("cpu",)
    run: Callable | None = None  # its entry point, where the part's caller takes it from here


def definition(module: Any) -> str:
    """A module's class as ``Kernel.implements`` names it."""
    return f"{type(module).__module__}.{type(module).__qualname__}"


def is_definition(module: Any, name: str) -> bool:
    """Whether ``module`` is an instance of exactly the class ``name`` (a subclass or a copy is a
    new definition: it declares its own kernels)."""
    return definition(module) == name


def registry() -> list[Kernel]:
    """Every kernel, in the order ``choose`` tries them."""
    found: list[Kernel] = []
    for name in MODULES:
        found.extend(importlib.import_module(f"attnmt.kernels.{name}").KERNELS)
    return found


_REGISTRY: list[Kernel] | None = None


def kernels(part: str | None = None) -> list[Kernel]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = registry()
    return [k for k in _REGISTRY if part is None or k.part == part]


def choose(part: str, module: Any, device: str | None = None) -> tuple[Kernel | None, str]:
    """The first kernel of ``part`` that supports ``module`` (on ``device``, if given), or None
    and why none does."""
    reasons = []
    for kernel in kernels(part):
        if not is_definition(module, kernel.implements):
            continue
        ok, why = kernel.supports(module)
        if ok and (device is None or device in kernel.devices):
            return kernel, why
        reasons.append(why if not ok else f"{ON} {device}: {kernel.name} runs on {'/'.join(kernel.devices)}")
    if not reasons:
        return None, "no fused kernel declares it"
    return None, "; ".join(dict.fromkeys(reasons))


ON = "device"  # a reason that starts so is the device's, not the definition's

# the parts a module's role calls for, by the attribute that holds it: the decoder's attention
# is looked at whatever its class (a new attention has no kernel: that is worth saying)
ROLES = {"attention": ("attention steps", "attention search")}


# the parts a search runs (translate, serve)
SEARCH = ("search step", "attention search", "linear maps")


def paths(model: nn.Module, device: str = "cpu", parts: tuple[str, ...] | None = None) -> dict[str, str]:
    """{"[role ]Class: part": kernel name, or "reference (why)"} for every part of ``model``
    (of ``parts``, if given) that a kernel declares, and for every module in a role of ``ROLES``
    (the decoder's attention), whatever its class. Modules of one class in no role share one
    entry."""
    out: dict[str, str] = {}
    every = kernels()
    for name, module in model.named_modules():
        role = name.rpartition(".")[2] if name.rpartition(".")[2] in ROLES else ""
        claimed = {k.part for k in every if is_definition(module, k.implements)}
        for part in sorted(claimed | set(ROLES.get(role, ()))):
            if parts is not None and part not in parts:
                continue
            label = f"{role + ' ' if role else ''}{type(module).__name__}: {part}"
            if label not in out:
                kernel, why = choose(part, module, device)
                out[label] = kernel.name if kernel else f"reference ({why})"
    return out


def search_notes(runs: list) -> list[str]:
    """``fallbacks`` of the search parts of each loaded run's model (``attnmt translate``)."""
    lines: list[str] = []
    for run in runs:
        lines += [x for x in fallbacks(paths(run.model, run.device.type, SEARCH)) if x not in lines]
    return lines


def fallbacks(recorded: dict[str, str]) -> list[str]:
    """One line per module whose parts all take the reference path for a reason of its own
    (not the device's: CPU kernels on a GPU), e.g. "attention ToyCosine: reference path (no
    fused kernel declares it)"."""
    by_module: dict[str, list[str]] = {}
    for label, path in recorded.items():
        by_module.setdefault(label.rpartition(":")[0], []).append(path)
    lines = []
    for module, taken in by_module.items():
        why = [p[len("reference ("):-1] for p in taken if p.startswith("reference (")]
        if len(why) == len(taken) and not any(w.startswith(ON + " ") for w in why):
            lines.append(f"{module}: reference path ({'; '.join(dict.fromkeys(why))})")
    return lines
