"""Idempotent corpus output that never loses a file it did not write.

A manifest build (bible, domains) writes its files and a ``manifest.json`` that records the build
settings and every file's SHA-256; manifests hold no timestamps, so rebuilding the same inputs
gives byte-identical directories. A build whose manifest matches the requested settings and whose
files all still hash as recorded is complete: :func:`is_complete` lets a builder skip it.

Every builder writes through :func:`write_new`: a file already there with the same bytes is left
alone (a rerun rewrites nothing), and one with other bytes is replaced only if an earlier build
with the same settings wrote it and nobody changed it since (:func:`own_files`: a new format,
newer sources, a changed ``--add`` file), else only with ``--force``; otherwise the build stops
before anything is written. Generated sets without a manifest (synthetic, agreement) own nothing.
All files of one build are renamed into place together
(:func:`attnmt.data.corpus.output_group`), the manifest last.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from pathlib import Path

from attnmt.data.corpus import atomic_output, output_group
from attnmt.errors import UserError
from attnmt.files import open_regular

MANIFEST = "manifest.json"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(out_dir: str | Path) -> dict | None:
    """The manifest in ``out_dir``, or None if there is none a builder could have written."""
    try:
        with open_regular(Path(out_dir) / MANIFEST, "manifest") as f:  # no FIFO, no device
            man = json.load(f)
    except (OSError, ValueError, UserError):
        return None
    ok = isinstance(man, dict) and isinstance(man.get("config"), dict) and isinstance(man.get("files"), dict)
    return man if ok else None


def _intact(path: Path, digest: object) -> bool:
    """``path`` is a file that hashes as recorded (one that cannot be read does not)."""
    try:
        return path.is_file() and sha256_file(path) == digest
    except OSError:
        return False


def is_complete(out_dir: str | Path, config: dict) -> bool:
    """True if ``out_dir`` holds a finished build with exactly these settings."""
    man = read_manifest(out_dir)
    if not man or man["config"] != config:
        return False
    return all(_intact(Path(out_dir) / name, digest) for name, digest in man["files"].items())


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def text_of(lines: Iterable[str]) -> str:
    """The text of a file of ``lines``, each ended by a newline (as ``write_lines`` writes them)."""
    return "".join(line + "\n" for line in lines)


def own_files(out_dir: str | Path, settings: dict) -> set[str]:
    """Files in ``out_dir`` that an earlier build wrote and that still hash as its manifest says,
    if that build's settings agree with ``settings`` (a subset of the config, e.g. ``{"corpus":
    "bible", "english": "web"}``); its manifest too. A rebuild may replace them without --force."""
    man = read_manifest(out_dir)
    if not man or any(man["config"].get(k) != v for k, v in settings.items()):
        return set()
    return {MANIFEST} | {name for name, digest in man["files"].items()
                         if _intact(Path(out_dir) / name, digest)}


def foreign(out_dir: str | Path, names: Iterable[str], settings: dict) -> list[str]:
    """Those of ``names`` that are in ``out_dir`` and no earlier build with ``settings`` wrote: a
    build that writes them with other bytes stops without --force."""
    own = own_files(out_dir, settings)
    return [name for name in names if name not in own and (Path(out_dir) / name).exists()]


def write_new(out_dir: str | Path, files: dict[str, str], force: bool = False,
              own: Collection[str] = ()) -> list[str]:
    """Write ``files`` (name -> text) into ``out_dir`` without losing anything: a file already there
    with the same bytes is left as it is (a rerun is a no-op), one with other bytes stops the build
    before anything is written, unless it is one of ``own`` (:func:`own_files`) or ``force``. The
    files are written as one output (:func:`attnmt.data.corpus.output_group`), in the order given.
    Returns the names written."""
    out = Path(out_dir)
    data = {name: text.encode("utf-8") for name, text in files.items()}
    new = [name for name, b in data.items() if not _same_bytes(out / name, b)]
    clash = [name for name in new if name not in own and (out / name).exists()]
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


def write_build(out_dir: str | Path, files: dict[str, str], config: dict, info: dict,
                settings: dict, force: bool = False) -> None:
    """Write a manifest build: ``files`` and a manifest recording ``config`` (what decides the
    output), the files' hashes and ``info`` (counts, sources), through :func:`write_new`. Files of
    an earlier build with the same ``settings`` (a subset of ``config``) are replaced; other files
    of the same names need ``force``. The manifest is renamed into place last, so a build cut off
    while renaming is never complete."""
    hashes = {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in files.items()}
    man = {"config": config, "files": hashes, "info": info}
    manifest = text_of([json.dumps(man, indent=1, sort_keys=True, ensure_ascii=False)])
    write_new(out_dir, {**files, MANIFEST: manifest}, force, own_files(out_dir, settings))
