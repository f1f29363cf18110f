"""Time as the walk's annotations write it (RFC 3339, UTC, to the second), and how long ago such a stamp was."""

from __future__ import annotations

import datetime as dt
import time


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def since(ts: str | None) -> float:
    """Seconds since an RFC 3339 timestamp (or a unix time, as the operator writes some); 0 if unparsable."""
    if not ts:
        return 0.0
    try:
        if ts.isdigit():
            return time.time() - int(ts)
        return (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return 0.0
