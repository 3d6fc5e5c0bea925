"""benchmarks/window_mask.py: every mask kind timed in every checkout, in the JSON and the summary."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_kind_gets_a_time_per_checkout():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "window_mask.py"), "--shape", "2,2,6,11",
                          "--rounds", "2", "--repeats", "1", "--checkouts", str(ROOT)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    result = json.loads(lines[0])
    kinds = {row["kind"] for row in result["rows"]}
    assert kinds == {"exact/0", "sum/0", "exact/3", "sum/5"}
    assert all(len(row["ms"]) == 2 and row["ms_median"] > 0 for row in result["rows"])
    assert lines[1].startswith("summary: ") and "exact/3" in lines[1]
