"""Which kernel computes which part of a model: every kernel declares what it implements, and a
model's parts are matched against those declarations, never found by probing a module's
attributes (a new attention then takes the reference path, and says so).

A ``Kernel`` names its ``part`` (the role it plays: "decoder loop", "attention steps", ...), the
definition it ``implements`` (a class of attention/ or models/, as text: kernels import no
definitions) with the settings it covers, the devices it runs on, and ``supports(definition) ->
(bool, reason)``. Each kernel module lists its kernels in ``KERNELS`` (a plug-in's kernels:
``register``). ``choose(part, module)`` takes the first that supports the module: it is the one
place a path is picked, per module instance, at every call that picks one (a Transformer
attention is matched by the variant it computes, ``MultiHeadAttention.definition``).

``paths(model, device)`` is what a run records (the trainer's ``paths`` line in log.jsonl,
translate's notes): ``choose`` asked of every module for every part it takes (its class's
kernels' parts, or its ``role``'s: ``ROLES``), so the record is the decision. Modules of one label
("[role ]Class: part") that decide alike share one entry; where they differ, each is named by its
place in the model. ``fallbacks`` are the lines ``attnmt train`` / ``translate`` print once: one
per module label whose parts all take the reference path for a reason of its own.
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
           "transformer_search", "window_search", "attention_dropout")


@dataclass(frozen=True)
class Kernel:
    name: str  # module.function of the kernel, e.g. "fused_rnn.input_feeding_loop"
    part: str  # the role it computes, e.g. "decoder loop"
    implements: str  # the definition's qualified class name
    covers: str  # the settings it covers, in words, e.g. "score dot, general or location"
    supports: Callable[[Any], tuple[bool, str]]  # (applies to this definition, why not)
    devices: tuple[str, ...] = ("cpu",)
    run: Callable | None = None  # its entry point, where the part's caller takes it from here


def definition(module: Any) -> str:
    """A module's class as ``Kernel.implements`` names it."""
    return f"{type(module).__module__}.{type(module).__qualname__}"


def is_definition(module: Any, name: str) -> bool:
    """Whether ``module`` is an instance of exactly the class ``name`` (a subclass or a copy is a
    new definition: it declares its own kernels)."""
    return definition(module) == name


def subject(module: Any) -> Any:
    """What a module's kernels are matched against: the definition it computes where its class
    names one (``definition``: a Transformer attention's variant), else the module itself."""
    cls = type(module)
    named = _NAMES.get(cls)
    if named is None:  # (a class attribute missed costs an AttributeError: asked once per class)
        named = _NAMES[cls] = getattr(cls, "definition", None) is not None
    return module.definition if named else module


_NAMES: dict[type, bool] = {}  # class -> whether it names the definition it computes


_EXTRA: list[Kernel] = []  # kernels registered from outside kernels/ (a plug-in's)


def register(*new: Kernel) -> None:
    """Add kernels declared outside kernels/ (a plug-in variant's search step): ``choose`` tries
    them after the modules' own."""
    global _REGISTRY
    _EXTRA.extend(new)
    _REGISTRY = None
    _CANDIDATES.clear()


def registry() -> list[Kernel]:
    """Every kernel, in the order ``choose`` tries them."""
    found: list[Kernel] = []
    for name in MODULES:
        found.extend(importlib.import_module(f"attnmt.kernels.{name}").KERNELS)
    return found + _EXTRA


_REGISTRY: list[Kernel] | None = None
# (part, the definition's class) -> the kernels of that part declaring it, in order
_CANDIDATES: dict[tuple[str, type], list[Kernel]] = {}


def kernels(part: str | None = None) -> list[Kernel]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = registry()
    return [k for k in _REGISTRY if part is None or k.part == part]


def choose(part: str, module: Any, device: str | None = None) -> tuple[Kernel | None, str]:
    """The first kernel of ``part`` that supports ``module`` (its ``subject``; on ``device``, if
    given), or None and why none does. Called wherever a path is picked, at every such call:
    what matches a class is looked up once, each kernel's ``supports`` asked each time."""
    target = subject(module)
    key = (part, type(target))
    found = _CANDIDATES.get(key)
    if found is None:
        found = _CANDIDATES[key] = [k for k in kernels(part) if is_definition(target, k.implements)]
    if not found:
        return None, "no fused kernel declares it"
    reasons = []
    for kernel in found:
        ok, why = kernel.supports(target)
        if ok and (device is None or device in kernel.devices):
            return kernel, why
        reasons.append(why if not ok else f"{ON} {device}: {kernel.name} runs on {'/'.join(kernel.devices)}")
    return None, "; ".join(dict.fromkeys(reasons))


ON = "device"  # a reason that starts so is the device's, not the definition's

# the parts a module in a role takes. The LSTM decoder's attention is found by its attribute
# name, whatever its class (a new attention has no kernel: that is worth saying), and takes its
# class's parts too; a Transformer attention declares its role (``MultiHeadAttention.role``, set
# by its layer) and takes exactly its role's parts: an encoder's attention runs no search step.
ROLES = {
    "attention": ("attention steps", "attention search"),
    "encoder self-attention": ("multi-head attention",),
    "decoder self-attention": ("multi-head attention", "search self-attention"),
    "cross-attention": ("multi-head attention", "search cross-attention"),
}


# the parts a search runs (translate, serve)
SEARCH = ("search step", "attention search", "linear maps", "search self-attention", "search cross-attention")


def _label(name: str, module: nn.Module, claimed: set[str]) -> tuple[str, set[str]]:
    """A module's label ("[role ]what") and the parts it takes."""
    declared = module.__dict__.get("role")  # an attribute of the instance, declared by its model
    if declared:
        target = subject(module)
        what = target.name if target is not module and isinstance(getattr(target, "name", None), str) \
            else type(module).__name__
        return f"{declared} {what}", set(ROLES.get(declared, ()))
    attr = name.rpartition(".")[2]
    if attr in ROLES:
        return f"{attr} {type(module).__name__}", claimed | set(ROLES[attr])
    return type(module).__name__, claimed


def paths(model: nn.Module, device: str = "cpu", parts: tuple[str, ...] | None = None) -> dict[str, str]:
    """{"[role ]what: part": kernel name, or "reference (why)"} for every part every module of
    ``model`` takes (of ``parts``, if given): ``choose``'s answer for that module. Modules of one
    label that decide alike share its entry; where they differ, each gets an entry of its own,
    "label (its name in the model): part"."""
    taken: dict[str, list[tuple[str, str]]] = {}
    every = kernels()
    for name, module in model.named_modules():
        target = subject(module)
        claimed = {k.part for k in every if is_definition(target, k.implements)}
        label, wanted = _label(name, module, claimed)
        for part in sorted(wanted):
            if parts is not None and part not in parts:
                continue
            kernel, why = choose(part, module, device)
            taken.setdefault(f"{label}: {part}", []).append((name, kernel.name if kernel else f"reference ({why})"))
    out: dict[str, str] = {}
    for label, decided in taken.items():
        if len({path for _, path in decided}) == 1:
            out[label] = decided[0][1]
            continue
        what, _, part = label.rpartition(": ")
        for name, path in decided:
            out[f"{what} ({name}): {part}"] = path
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
