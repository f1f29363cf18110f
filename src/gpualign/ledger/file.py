"""Ledger files: one tag or image reference per line (with # comments), or a YAML/JSON list of them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from gpualign.base.errors import BadInput
from gpualign.model.image_ref import ImageRef


def split_ref(ref: str) -> tuple[str | None, str]:
    """'nvcr.io/nvidia/driver:580-…' → ('nvcr.io/nvidia/driver', '580-…'); '580-…' → (None, '580-…'). A digest
    reference carries no tag and is refused."""
    ref = ref.strip()
    if "@" in ref:
        raise ValueError("a digest reference names no tag")
    parsed = ImageRef.parse(ref)
    if parsed.tag:
        return parsed.name, parsed.tag
    if "/" in ref:
        raise ValueError("an image reference without a tag")
    return None, ref


def _entries_from_list(path: Path, items: object) -> list[str]:
    if isinstance(items, dict):
        items = items.get("images", items.get("tags"))
    if not isinstance(items, list):
        raise BadInput(f"{path}: expected a list of tags or image references (or a mapping with `images:`)")
    out: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise BadInput(f"{path}: item {i + 1} is not a string: {item!r}")
        out.append(item)
    return out


def read(path: Path) -> set[tuple[str | None, str]]:
    """The (repository, tag) entries a ledger file holds (repository None for a bare tag, which answers for any
    repository). `-` reads stdin. Bad entries are named by file and line; a file with no entry is refused."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as err:
        hint = ""
        if isinstance(err, FileNotFoundError) and re.match(r"[A-Za-z0-9.-]+(:[0-9]+)?/[a-z0-9]", str(path)):
            hint = f" (a registry is named with its scheme: --ledger registry://{path})"
        raise BadInput(f"ledger {path}: cannot read: {err.strerror}{hint}") from None
    except UnicodeDecodeError:
        raise BadInput(f"ledger {path}: not a text file") from None
    stripped = text.lstrip()
    entries: list[tuple[int, str]]
    if path.suffix == ".json" or path.suffix not in (".yaml", ".yml") and stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise BadInput(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
        entries = [(0, e) for e in _entries_from_list(path, data)]
    elif path.suffix in (".yaml", ".yml") or stripped.startswith("- ") or stripped.startswith("images:"):
        from gpualign.base import yamlio

        docs = yamlio.parse(text, str(path), documents=True)
        if len(docs) > 1:
            raise BadInput(f"{path}: a ledger holds one YAML document, not {len(docs)}")
        entries = [(0, e) for e in _entries_from_list(path, (docs[0] if docs else None) or [])]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append((n, line))
    tags: set[tuple[str | None, str]] = set()
    for n, entry in entries:
        where = f"{path}:{n}" if n else str(path)
        if any(c.isspace() for c in entry.strip()):
            raise BadInput(f"{where}: {entry!r} is not a tag or image reference")
        try:
            tags.add(split_ref(entry))
        except ValueError as err:
            raise BadInput(f"{where}: {entry!r}: {err}") from None
    if not tags:
        raise BadInput(f"ledger {path} holds no tags (an empty ledger would make every image missing)")
    return tags
