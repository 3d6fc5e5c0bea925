"""Weights derived from a module's parameters (concatenated, packed, transposed, tabulated), kept
from one call to the next: the one place that keeps them and says when they are stale.

    derived(module, name, sources, build, extra=())  ==  build()   (made again only when stale)

An entry is stale when a source tensor changed: an in-place update bumps its version counter
(``_version``), a move or a new tensor changes its data pointer; or when ``extra`` (options the
entry depends on, e.g. the search's precision) changed. torch's fused Adam updates parameters in
place WITHOUT bumping their counters, so the key alone cannot see training: every entry of a
module is also dropped when it enters or leaves training (``module.train(mode)``, which the
trainer's validation calls), through ``DerivedWeights``, a parameterless submodule ``_derived``
that ``nn.Module.train`` reaches as it reaches every child. It holds no parameter or buffer, so
checkpoints (state dict keys) do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

IMPLEMENTS = ()  # no definition: the cache of the kernels that derive weights

NAME = "_derived"  # the submodule's name on the module whose weights it derives from


class DerivedWeights(nn.Module):
    """A module's derived weights by name: (key, value), dropped on ``train(mode)``."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, tuple[tuple, Any]] = {}

    def train(self, mode: bool = True) -> "DerivedWeights":
        self.entries.clear()  # fused Adam bumps no version counter: see the module docstring
        return super().train(mode)

    def extra_repr(self) -> str:
        return ", ".join(self.entries)


def _holder(module: nn.Module) -> DerivedWeights:
    held = module._modules.get(NAME)  # a dict look-up: a search step at batch 1 counts calls
    if held is None:
        held = DerivedWeights()
        module.add_module(NAME, held)
    return held


def key_of(sources: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> tuple:
    """What tells two states of the sources apart: each tensor's data pointer and version."""
    return tuple((t.data_ptr(), t._version) for t in sources)


def derived(
    module: nn.Module, name: str, sources: tuple[torch.Tensor, ...] | list[torch.Tensor],
    build: Callable[[], Any], extra: tuple = (),
) -> Any:
    """``build()``, kept on ``module`` under ``name`` until a source or ``extra`` changes or the
    module enters or leaves training."""
    entries = _holder(module).entries
    key = (*extra, *key_of(sources))
    entry = entries.get(name)
    if entry is None or entry[0] != key:
        entry = entries[name] = (key, build())
    return entry[1]


def growing(
    module: nn.Module, name: str, sources: tuple[torch.Tensor, ...] | list[torch.Tensor],
    build: Callable[[Any], Any], fits: Callable[[Any], bool], extra: tuple = (),
) -> Any:
    """``derived`` for tables that grow (e.g. ranges kept for the longest sentence so far):
    ``build(previous)`` is called when the key changed (previous None) or when the kept value
    does not ``fits`` the call (previous: that value, to size the new one from)."""
    entries = _holder(module).entries
    key = (*extra, *key_of(sources))
    entry = entries.get(name)
    if entry is None or entry[0] != key:
        entry = entries[name] = (key, build(None))
    elif not fits(entry[1]):
        entry = entries[name] = (key, build(entry[1]))
    return entry[1]


def drop(module: nn.Module, name: str) -> None:
    """Forget ``name`` (e.g. training: don't hold a stale copy)."""
    held = module._modules.get(NAME)
    if held is not None:
        held.entries.pop(name, None)


def held(module: nn.Module, name: str) -> bool:
    """Whether ``module`` keeps ``name`` now (for tests)."""
    holder = module._modules.get(NAME)
    return holder is not None and name in holder.entries
