"""The sides of a ``peer_race.py`` row raced apart (``--only``): each side's result saved with the
race settings and when it finished, taken back into a later row when the settings agree, and
the row told how far apart its sides ran.

A CPU box's speed drifts between runs (up to ~25 % within minutes on the team's 2-vCPU boxes,
docs/results/race.md), so a ratio whose sides ran an hour apart can be off by that much. A row
with a side from an earlier run therefore says so beside its ratios (``apart_note``); the race
to claim is both sides in one run.
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = "%Y-%m-%d %H:%M:%S UTC"
APART_S = 600  # sides further apart than the budget and this get a note beside the row's ratios
# (in one run the second side ends a training budget and the translations after the first)


def side_key(args) -> dict:
    """What must agree for a side raced earlier to stand in a row with one raced now. The
    CTranslate2 compute types (``--ct2``) are not part of it: they only decide which CTranslate2
    columns a side has, and the ratio row takes the fastest of those present on each side."""
    return {"model": args.model, "recipe": args.recipe, "budget": args.budget, "threads": args.threads,
            "set": args.set, "max_train_lines": args.max_train_lines,
            "max_eval_lines": args.max_eval_lines, "report_every": args.report_every}


def stamp() -> dict:
    """{"commit": this checkout's short commit, "finished": now (``STAMP``)}: what a result records."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "finished": time.strftime(STAMP, time.gmtime())}


def save_side(folder: Path, result: dict, args) -> None:
    """``FOLDER/result.json``: the side's result, the race settings and when and from which commit."""
    record = {"result": result, "key": side_key(args), **stamp()}
    tmp = folder / "result.json.tmp"
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(tmp, folder / "result.json")


def load_side(folder: Path, args) -> dict | None:
    """With ``--only``, the other side's result from an earlier run in the same OUT and with the
    same settings (so one side can be re-raced after a change); None when there is none or its
    settings differ. Marked ``raced`` (when, which commit) and ``raced_at`` (seconds since the
    epoch, for ``apart_note``)."""
    path = folder / "result.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if {k: v for k, v in record.get("key", {}).items() if k != "ct2"} != side_key(args):  # ct2: older records
        print(f"peer_race: {path} was raced with other settings; not used", file=sys.stderr)
        return None
    try:
        finished = calendar.timegm(time.strptime(record["finished"], STAMP))
    except (KeyError, TypeError, ValueError):  # a record without a readable time: how far apart is unknown
        finished = None
    return {**record["result"], "raced": f"{record['finished']}, commit {record['commit']} (earlier run)",
            "raced_at": finished}


def apart_note(row: dict, sides: tuple[str, str], budget: float, now: float | None = None) -> str:
    """A line for a row whose two sides finished further apart than one run would leave them
    (``budget`` + ``APART_S`` seconds; a side raced now finished ``now``), else ""."""
    ends = {side: row[side].get("raced_at", time.time() if now is None else now) for side in sides}
    caveat = ("the machine's speed drifts between runs, so these ratios are indicative; race both sides "
              "in one run for a ratio to claim")
    unknown = [side for side in sides if ends[side] is None]
    if unknown:
        return f"the {unknown[0]} side is from an earlier run of unknown time ({row[unknown[0]].get('raced')}): {caveat}"
    gap = abs(ends[sides[0]] - ends[sides[1]])
    if gap <= budget + APART_S:
        return ""
    earlier = min(sides, key=ends.get)
    return f"the {earlier} side ran {gap / 60:.0f} min before the other ({row[earlier].get('raced', 'this run')}): {caveat}"
