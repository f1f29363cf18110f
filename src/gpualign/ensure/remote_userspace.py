"""A shared user-space image in the registry, fetched: what `ensure.compose` composes a driver image from and
`ensure.image` names as its user space (one value both read, so neither imports the other)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RemoteUserSpace:
    """A shared user-space image in the registry, its layers fetched and unpacked into a scratch tree."""

    repo: str
    reference: str  # host/repo:tag, for what is said
    digest: str  # its manifest's
    layers: list[dict[str, Any]]  # descriptors, as the image's manifest names them
    config: dict[str, Any]
    arch: str
    blobs: dict[str, Path] = field(default_factory=dict)  # layer digest -> the file fetched
    root: Path = Path()
    checked: dict[str, object] = field(default_factory=dict)  # userspace.check's record
    _scratch: tempfile.TemporaryDirectory[str] | None = None

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
