"""Plug-ins from outside the package: ``attnmt --user-dir DIR`` (fairseq's convention) imports
every module in DIR before the command runs, so that what they register (a Transformer attention
variant, an RNN attention or score: ``attnmt.attention.register``; a kernel:
``attnmt.kernels.dispatch.register``) is known to config validation and to the models.

A run records the folder (the config's ``user_dir``, saved in RUN/config.yaml), and reading that
config imports it again: ``translate``, ``serve``, ``export`` of the run find the plug-ins without
the flag. A folder that is gone is one line naming it; ``--user-dir`` on the command line takes
the place of the recorded one (the plug-ins moved).

Modules are imported by their file names with DIR first on ``sys.path`` (a plug-in may import
its neighbours), in sorted order, each once per process; names starting with ``_`` or ``.`` are
skipped.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnmt.errors import UserError

_LOADED: dict[Path, list[str]] = {}  # folder -> the modules imported from it
_GIVEN: list[Path] = []  # the command line's --user-dir (at most one)

# what config errors add to a name that no registry knows (an unknown variant, score or section)
HINT = "a plug-in's? attnmt --user-dir DIR imports the folder that registers it"


def load(directory: str | Path, where: str | None = None, line: int | None = None) -> Path:
    """Import every module of ``directory`` (see the module docstring); returns the folder,
    resolved. ``where``/``line``: who named it, for the one-line errors (a missing folder, a
    module that cannot be imported or clashes with another module of its name)."""
    folder = Path(directory).expanduser().resolve()
    if folder in _LOADED:
        return folder
    if not folder.is_dir():
        if where is None:
            raise UserError(f"--user-dir {folder}: not a directory (the folder of plug-ins to import)")
        raise UserError(f"user_dir {folder}: not a directory (the folder of plug-ins this config needs; "
                        "attnmt --user-dir DIR names where they are now)", where, line)
    modules = sorted(p for p in folder.glob("*.py") if not p.name.startswith(("_", ".")))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    names = []
    for path in modules:
        name = path.stem
        known = sys.modules.get(name)
        if known is not None:
            if Path(getattr(known, "__file__", "") or "").resolve() != path:
                raise UserError(f"plug-in {path.name}: a module named {name!r} is already imported "
                                f"from {getattr(known, '__file__', None) or 'elsewhere'}; rename the file", str(folder))
        else:
            try:
                importlib.import_module(name)
            except Exception as err:  # a plug-in's own error: one line, the file and line it came from
                frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == path]
                at = f":{frames[-1].lineno}" if frames else ""
                raise UserError(f"plug-in {path}{at}: cannot import it ({type(err).__name__}: {err})") from None
        names.append(name)
    _LOADED[folder] = names
    return folder


@contextmanager
def command_line(directory: str | Path | None) -> Iterator[Path | None]:
    """While a command runs: its ``--user-dir`` imported, and the folder a config read meanwhile
    records instead of its own ``user_dir`` (``given``). None: no flag."""
    folder = load(directory) if directory is not None else None
    before = _GIVEN[:]
    _GIVEN[:] = [folder] if folder is not None else []
    try:
        yield folder
    finally:
        _GIVEN[:] = before


def given() -> Path | None:
    """The running command's ``--user-dir`` (None: none given)."""
    return _GIVEN[0] if _GIVEN else None
