"""A suite's Release file (the text of a verified InRelease) read as apt reads it. Pure.

It says when the suite was made and until when it may be trusted (`Date`, `Valid-Until`: an older copy replayed by
a mirror is refused), whether its indexes can be fetched by hash (`Acquire-By-Hash`), and the SHA-256 and size of
every index, so that an index is trusted only when its bytes hash to what the signed file says.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Release:
    suite: str  # Codename (trixie-security), else Suite
    date: float | None  # epoch seconds
    valid_until: float | None
    by_hash: bool
    sha256: dict[str, tuple[str, int]] = field(default_factory=dict)  # path (main/binary-amd64/Packages.xz) -> hash

    def problem(self, now: float) -> str | None:
        """Why the Release may not be trusted now (expired: a replayed old copy), or None."""
        if self.valid_until is not None and now > self.valid_until:
            return f"its Valid-Until ({_iso(self.valid_until)}) has passed: an old copy, replayed or never refreshed"
        return None


def parse(text: str) -> Release:
    """A Release file's fields: the ones gpualign reads (unknown ones are passed over, as apt does)."""
    fields: dict[str, str] = {}
    sha: dict[str, tuple[str, int]] = {}
    current = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t"):
            if current == "SHA256":
                parts = line.split()
                if len(parts) == 3 and parts[1].isdigit():
                    sha[parts[2]] = (parts[0].lower(), int(parts[1]))
            continue
        if ":" in line:
            current, value = line.split(":", 1)
            fields[current] = value.strip()
    return Release(fields.get("Codename") or fields.get("Suite") or "", _date(fields.get("Date")),
                   _date(fields.get("Valid-Until")), fields.get("Acquire-By-Hash", "").lower() == "yes", sha)


def _date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _iso(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
