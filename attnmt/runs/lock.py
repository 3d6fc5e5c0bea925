"""One writer per run directory: ``train`` holds an advisory lock on RUN/.lock for its whole life.

    with RunLock(run_dir):      # a second train --out RUN (or --resume) fails at once, exit 2
        ...                     # "RUN: is being trained by another process (pid 1234, RUN/.lock)"

The lock is ``fcntl.flock`` on the lock file (which holds the holder's pid, for the message), so
the operating system releases it when the holder exits however it exits: after ``kill -9`` the
file may stay behind, but it is no longer locked and ``--resume`` takes it. Readers (translate,
eval, serve) take no lock: checkpoints and pointers are replaced atomically (runs/checkpoint.py),
so a reader sees the old checkpoint or the new one. The holder removes the file when it is done;
a process that locked a file since removed (it opened the name before the removal) sees that the
name now belongs to another file and tries again, so two processes never both hold the run.
Where ``fcntl`` does not exist (Windows) there is no lock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from attnmt.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux or macOS
    fcntl = None

LOCK_NAME = ".lock"


class RunLock:
    """The lock of ``run_dir`` (created, with its parents, if it does not exist yet)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        if fcntl is None:
            return
        try:
            self._acquire()
        except OSError as err:  # a folder without write permission, a read-only disk
            raise UserError(f"cannot be written ({err.strerror or err})", str(self.run_dir)) from None

    def _acquire(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
                raise UserError("is not a regular file: the run's lock file (remove it)", str(self.path))
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise UserError(f"is being trained by another process ({holder}, lock {self.path}); "
                                "one run has one writer: wait for it, or stop it first", str(self.run_dir)) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:  # removed by the holder that just finished
                same = False
            if same:
                break
            os.close(fd)  # the name belongs to a newer file now: lock that one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        """Remove the lock file (while still holding it) and release the lock. A lock file that
        is gone already (a failed start removed the run it created) is fine."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a folder made read-only: the lock is released all the same
        os.close(self.fd)
        self.fd = None


def _holder(fd: int) -> str:
    """'pid N' as the lock file says, or 'pid unknown' (it was just created and is still empty)."""
    text = ""
    for _ in range(20):  # the holder writes its pid right after it took the lock
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            break
        if text:
            break
        time.sleep(0.01)
    return f"pid {text}" if text.isdigit() else "pid unknown"
