"""JSON every parser accepts: RFC 8259 has no NaN or Infinity, so non-finite floats become null.

``json.dumps`` writes them as the bare words ``NaN`` and ``Infinity`` by default, which strict
readers (jq, browsers' JSON.parse, most other languages) refuse. Everything attnmt prints or logs as
JSON goes through ``dumps``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN/±Infinity float (also inside dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs) -> str:
    """``json.dumps`` of ``finite(value)``; never writes NaN or Infinity."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
