"""The repository names no folder of the machine it was written on (configs, docs, experiments,
benchmarks, code): every path is relative to the repository root or the user's choice."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".js", ".html", ".css", ".txt", ".cfg"}
SKIP = {".git", ".pytest_cache", "data", "runs", "build", "dist", ".venv", ".make", "exp", "node_modules"}
# Written in pieces so this file does not match itself.
MACHINE = re.compile("(?<![\\w.~-])/(" + "|".join(["wo" + "rk", "ro" + "ot", "ho" + "me"]) + ")/")


def _files():
    """Tracked files (a contributor's untracked notes are theirs); every file when git is absent."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        paths = [ROOT / p for p in listed.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = list(ROOT.rglob("*"))
    for path in paths:
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP or not path.is_file():
            continue
        if path.suffix in TEXT or path.name in ("Makefile", ".gitignore", "run", "test-deps"):
            yield path, rel


def test_no_file_names_a_machine_folder():
    found = [f"{rel}:{n}" for path, rel in _files()
             for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if MACHINE.search(line)]
    assert not found, found


def test_the_pattern_finds_what_it_should():
    assert MACHINE.search("data: " + "/wo" + "rk/shared/bible/train")
    assert MACHINE.search("cd " + "/ho" + "me/me/attnmt")
    assert not MACHINE.search("runs/work/x and data/bible/train and a/root/b")
