"""Where gpualign keeps what it caches (Debian's archive readings, compiled modules, build roots, the lab's
binaries): one place, for every room."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$GPUALIGN_CACHE, else $XDG_CACHE_HOME/gpualign, else ~/.cache/gpualign."""
    if env := os.environ.get("GPUALIGN_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpualign"
