"""Atomic, idempotent corpus output: files are written to a temporary name and renamed, and a
``manifest.json`` written last records the build settings and every file's SHA-256.

A build whose manifest matches the requested settings and whose files all still hash as
recorded is complete: :func:`is_complete` lets a builder skip it. Manifests hold no
timestamps, so rebuilding the same inputs gives byte-identical directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

MANIFEST = "manifest.json"


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory + rename, so a
    reader (or an interrupted build) never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_lines(path: str | Path, lines: Iterable[str]) -> None:
    """One line per item, newline-terminated; items must not contain newlines."""
    write_atomic(path, "".join(f"{line}\n" for line in lines))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(out_dir: str | Path) -> dict | None:
    try:
        with open(Path(out_dir) / MANIFEST, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_complete(out_dir: str | Path, config: dict) -> bool:
    """True if ``out_dir`` holds a finished build with exactly these settings."""
    man = read_manifest(out_dir)
    if not man or man.get("config") != config or not isinstance(man.get("files"), dict):
        return False
    for name, digest in man["files"].items():
        p = Path(out_dir) / name
        if not p.is_file() or sha256_file(p) != digest:
            return False
    return True


def write_manifest(out_dir: str | Path, config: dict, files: Iterable[str], info: dict) -> None:
    """Record ``config`` (what decides the output), the files' hashes, and ``info`` (counts,
    sources); written last, so its presence means every listed file is complete."""
    out_dir = Path(out_dir)
    man = {
        "config": config,
        "files": {name: sha256_file(out_dir / name) for name in sorted(files)},
        "info": info,
    }
    write_atomic(out_dir / MANIFEST, json.dumps(man, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def invalidate(out_dir: str | Path) -> None:
    """Remove the manifest before rewriting files, so a crash mid-build is never 'complete'."""
    try:
        os.unlink(Path(out_dir) / MANIFEST)
    except FileNotFoundError:
        pass
