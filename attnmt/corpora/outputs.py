"""Idempotent corpus output: files are written atomically (:func:`attnmt.data.corpus.write_lines`:
temporary name, then rename), and a ``manifest.json`` written last records the build settings
and every file's SHA-256.

A build whose manifest matches the requested settings and whose files all still hash as
recorded is complete: :func:`is_complete` lets a builder skip it. Manifests hold no
timestamps, so rebuilding the same inputs gives byte-identical directories.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from attnmt.data.corpus import write_lines

MANIFEST = "manifest.json"


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
    write_lines(out_dir / MANIFEST, [json.dumps(man, indent=1, sort_keys=True, ensure_ascii=False)])


def invalidate(out_dir: str | Path) -> None:
    """Remove the manifest before rewriting files, so a crash mid-build is never 'complete'."""
    try:
        os.unlink(Path(out_dir) / MANIFEST)
    except FileNotFoundError:
        pass
