"""The RBAC table of docs/security.md, read as rights, and a manifest's rules read the same way, so a test can hold
the two equal: a right is (verb, resource, resourceName or None)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.cli import ROOT

Right = tuple[str, str, str | None]
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def table(path: Path = ROOT / "docs" / "security.md") -> dict[str, tuple[set[Right], str]]:
    """role name -> (its rights as the doc states them, the manifest the doc names)."""
    rows: dict[str, tuple[set[Right], str]] = {}
    text = path.read_text()
    section = text[text.index("## What each use may do"):]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if len(cells) != 4 or cells[0] == "who":
            continue
        role = re.findall(r"`([^`]+)`", cells[1])[0]
        manifest = re.findall(r"`([^`]+)`", cells[3])[0]
        rows[role] = (rights_of(cells[2]), manifest)
    return rows


def rights_of(may: str) -> set[Right]:
    """'get, list `nodes`; create `leases`; get `leases` named x (why)' -> the rights it states."""
    out: set[Right] = set()
    for chunk in re.sub(r"\([^)]*\)", "", may).split(";"):  # what is in parentheses is for people
        head = chunk.split("`", 1)[0]
        verbs = [v for v in re.split(r"[,\s]+", head) if v and v != "and"]
        assert verbs and all(v in VERBS for v in verbs), f"not a verb list: {head!r} in {may!r}"
        resources = re.findall(r"`([^`]+)`", chunk)
        named = re.search(r"named (\S+)", chunk)
        out |= {(v, r, named.group(1) if named else None) for v in verbs for r in resources}
    return out


def rules_rights(rules: Iterable[dict[str, Any]]) -> set[Right]:
    return {(v, r, n) for rule in rules for v in rule["verbs"] for r in rule["resources"]
            for n in (rule.get("resourceNames") or [None])}
