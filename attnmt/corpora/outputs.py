"""Idempotent corpus output: files are written atomically (:func:`attnmt.data.corpus.write_lines`:
temporary name, then rename), and a ``manifest.json`` written last records the build settings
and every file's SHA-256.

A build whose manifest matches the requested settings and whose files all still hash as
recorded is complete: :func:`is_complete` lets a builder skip it. Manifests hold no
timestamps, so rebuilding the same inputs gives byte-identical directories.

Generated sets without a manifest (synthetic, agreement) go through :func:`write_new`: a file
already there with other content is never replaced unless the user says ``--force``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from attnmt.data.corpus import atomic_output, output_group, write_lines
from attnmt.errors import UserError

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


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def write_new(out_dir: str | Path, files: dict[str, str], force: bool = False) -> list[str]:
    """Write ``files`` (name -> text) into ``out_dir`` without losing anything: a file already there
    with the same bytes is left as it is (a rerun is a no-op), one with other bytes stops the build
    before anything is written, unless ``force``. The files are written as one output
    (:func:`attnmt.data.corpus.output_group`). Returns the names written."""
    out = Path(out_dir)
    data = {name: text.encode("utf-8") for name, text in files.items()}
    new = [name for name, b in data.items() if not _same_bytes(out / name, b)]
    clash = [name for name in new if (out / name).exists()]
    if clash and not force:  # a file of the same name may be the user's own corpus
        more = f", as do {len(clash) - 1} more of the outputs" if len(clash) > 1 else ""
        raise UserError(f"already exists with other content{more} (--force overwrites)",
                        str(out / clash[0]))
    out.mkdir(parents=True, exist_ok=True)
    with output_group():
        for name in new:
            with atomic_output(out / name, "wb") as f:
                f.write(data[name])
    return new
