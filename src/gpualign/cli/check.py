"""`gpualign check` and `gpualign plan` (filled in by the check issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
