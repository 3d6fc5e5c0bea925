"""Rounds of worker processes, each run in a checkout of attnmt (its own ``attnmt``, one thread):
the before-and-after machinery of ``variant_updates.py`` and ``window_mask.py``.

A job is (checkout, name); every round runs every job once, the order rotated by one per round so
that no job always runs first or last. A worker prints one JSON line last; its dict is collected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def checkout_dirs(spec: str) -> list[str]:
    """``--checkouts``' comma-separated folders, resolved."""
    return [str(Path(c).resolve()) for c in spec.split(",")]


def run_rounds(jobs: list[tuple[str, str]], rounds: int, command: Callable[[str, int], list[str]],
               label: str) -> dict[tuple[str, str], list[dict]]:
    """For each job its workers' replies, one per round. ``command(name, round)``: the worker's
    command line, run with the checkout as the working directory and OMP_NUM_THREADS=1; a failing
    worker ends the program with one line naming ``label``, the job and its last error line."""
    replies: dict = {job: [] for job in jobs}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for r in range(rounds):
        for checkout, name in jobs[r % len(jobs):] + jobs[: r % len(jobs)]:
            out = subprocess.run(command(name, r), cwd=checkout, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{label}: {name} in {checkout} failed: {out.stderr.strip().splitlines()[-1:]}")
            replies[(checkout, name)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return replies
