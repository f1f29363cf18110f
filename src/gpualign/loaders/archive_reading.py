"""What gpualign last read of a Debian release's archive: NVIDIA's module source packages and their versions, kept
in the cache (`<cache>/ensure/apt/<suite>/sources.json`) by `gpualign ensure`, which reads the archive itself.
check and plan read it back, so that their ACTION says `build` only for what ensure would build; without a reading,
the rules' copy (rules/driver_images.yaml, `debian`) stands."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpualign.base.cache import cache_root
from gpualign.model.makers import DebianTable, sources_from


def ensure_root() -> Path:
    """Where `gpualign ensure` keeps what it reads and makes (apt lists, modules, images' contents)."""
    return cache_root() / "ensure"


def path(suite: str) -> Path:
    return ensure_root() / "apt" / suite / "sources.json"


def write(suite: str, packages: Mapping[str, str], arch: str | None = None,
          headers: Iterable[str] | None = None) -> None:
    """Keep a reading of the suite's NVIDIA module source packages (package -> Debian version) and, for one
    architecture, the kernel releases whose headers it carries (the other architectures' kept as last read), whole
    or not at all."""
    out = path(suite)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = {str(a): [str(r) for r in rs] for a, rs in json.loads(out.read_text()).get("headers", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        kept = {}
    if arch is not None and headers is not None:
        kept[arch] = sorted(headers)
    fd, partial = tempfile.mkstemp(prefix=".sources.", dir=out.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump({"read": time.strftime("%Y-%m-%d", time.gmtime()), "packages": dict(sorted(packages.items())),
                   "headers": kept}, handle)
    os.replace(partial, out)


def overlay(table: DebianTable) -> DebianTable:
    """The table with each release's sources as its archive was last read, where it was (an unreadable or empty
    reading is passed over: the rules' copy stands)."""
    for os_tag in table.os_tags:
        release = table.get(os_tag)
        assert release is not None
        try:
            data = json.loads(path(release.suite).read_text())
            packages = {str(k): str(v) for k, v in data["packages"].items()}
            read = str(data["read"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        sources = sources_from(packages)
        if sources:
            table = table.with_sources(os_tag, sources, f"Debian's archive on {read}")
        headers = data.get("headers")
        if isinstance(headers, dict) and headers:
            releases = frozenset(str(r) for rs in headers.values() if isinstance(rs, list) for r in rs)
            table = table.with_headers(os_tag, releases, f"Debian's archive on {read}")
    return table
