"""NVIDIA driver versions as GFD labels spell them ("580", "06", "" are all real values)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_PART = re.compile(r"[0-9]{1,9}")


@total_ordering
@dataclass(frozen=True)
class DriverVersion:
    """major.minor[.rev] compared as integers; a missing revision sorts before any revision."""

    major: int
    minor: int
    rev: int | None = None

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        """'550.54.14', '570.26', '580.65.06' -> DriverVersion. Raises ValueError on anything else."""
        parts = text.strip().split(".")
        if not 2 <= len(parts) <= 3 or not all(_PART.fullmatch(p) for p in parts):
            raise ValueError(f"not a driver version: {text!r}")
        nums = [int(p) for p in parts]
        return cls(nums[0], nums[1], nums[2] if len(nums) == 3 else None)

    @classmethod
    def from_parts(cls, major: str, minor: str, rev: str | None) -> DriverVersion:
        if not _PART.fullmatch(major or "") or not _PART.fullmatch(minor or ""):
            raise ValueError(f"not a driver version: major={major!r} minor={minor!r}")
        if rev not in (None, "") and not _PART.fullmatch(rev):
            raise ValueError(f"not a driver revision: {rev!r}")
        return cls(int(major), int(minor), int(rev) if rev else None)

    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, -1 if self.rev is None else self.rev)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self.key() < other.key()

    @property
    def branch(self) -> str:
        return str(self.major)

    def __str__(self) -> str:
        # Minor and revision are zero-padded to two digits, as NVIDIA writes them (580.65.06).
        base = f"{self.major}.{self.minor:02d}"
        return base if self.rev is None else f"{base}.{self.rev:02d}"
