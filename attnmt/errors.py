"""User-facing errors.

Anything the user can fix (bad input file, malformed config, wrong flag combination) raises
``UserError`` with a one-line message that names the file and, where known, the line. The CLI
prints it as ``attnmt: error: <message>`` and exits with status 2, without a traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by user input; printed as one line, never with a traceback."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


def key_error(key: str, message: str) -> None:
    """Raise ``UserError("KEY MESSAGE")``: how configuration checks report a bad setting when no
    file and line are known (config.validate passes its own reporter that adds them)."""
    raise UserError(f"{key} {message}")
