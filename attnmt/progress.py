"""Progress bars for long jobs of the command line (translate, score, rerank, eval, ngram).

The library's long loops open ``progress(total, desc)`` and report what they finished; a bar
appears only where the command line asked for bars (``show_progress``, set by ``attnmt`` for the
commands that take long) and stderr is a terminal, so a pipe, a log file, a test or a Python
caller never sees one. The bar is tqdm's, on stderr, gone when the job ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SHOW: ContextVar[bool] = ContextVar("attnmt_progress", default=False)


@contextmanager
def show_progress(on: bool = True) -> Iterator[None]:
    """Within it, long loops draw a bar (still only where stderr is a terminal): a command's run."""
    token = _SHOW.set(on)
    try:
        yield
    finally:
        _SHOW.reset(token)


def shown() -> bool:
    stream = sys.stderr
    return _SHOW.get() and stream is not None and stream.isatty()


class Bar:
    """What a loop reports to: ``update(n)`` more done, or ``set(n)`` done in all (thread-safe)."""

    def __init__(self, bar=None):
        self._bar, self._lock = bar, threading.Lock()

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.update(n)

    def set(self, n: int) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.update(max(0, n - self._bar.n))


@contextmanager
def progress(total: int, desc: str, unit: str = "line") -> Iterator[Bar]:
    """A ``Bar`` over ``total`` units: tqdm's on stderr where ``shown()``, else one that does nothing."""
    if total <= 0 or not shown():
        yield Bar()
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
               mininterval=0.5)
    try:
        yield Bar(bar)
    finally:
        bar.close()
