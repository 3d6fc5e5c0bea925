"""Commands with sub-commands (``attnmt data bible``, ``attnmt analyse heatmap``, ...).

Every parser that runs something, a command's or a sub-command's, sets ``func`` to a
``run_*(args) -> int``; ``main`` calls ``args.func(args)``. A command with sub-commands lists one
adder per sub-command, each ``_add_<name>(sub)`` adding its parser, and registers them with
``add_group``. Adding a sub-command = writing its adder and run function and listing the adder.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def add_group(
    subparsers: argparse._SubParsersAction,
    name: str,
    adders: Sequence[Callable[[argparse._SubParsersAction], None]],
    help: str,
    description: str | None = None,
    metavar: str = "COMMAND",
) -> argparse.ArgumentParser:
    """Add command ``name`` whose sub-commands the ``adders`` add."""
    p = subparsers.add_parser(name, help=help, description=description or help)
    sub = p.add_subparsers(dest=f"{name}_command", metavar=metavar)
    sub.required = True
    for add in adders:
        add(sub)
    return p
