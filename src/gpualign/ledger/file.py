"""Ledger files: one tag or image reference per line (with # comments), or a YAML/JSON list of them."""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gpualign.errors import BadInput


def tag_of(ref: str) -> str:
    """'nvcr.io/nvidia/driver:580-…' or '580-…' → '580-…'. A digest reference carries no tag and is refused."""
    ref = ref.strip()
    if "@" in ref:
        raise ValueError("a digest reference names no tag")
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        return last.split(":", 1)[1]
    if "/" in ref:
        raise ValueError("an image reference without a tag")
    return ref


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


def read(path: Path) -> set[str]:
    """The set of tags a ledger file holds. Bad entries are named by file and line."""
    try:
        text = path.read_text()
    except OSError as err:
        raise BadInput(f"ledger {path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"ledger {path}: not a text file") from None
    stripped = text.lstrip()
    entries: list[tuple[int, str]]
    if path.suffix == ".json" or stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise BadInput(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
        entries = [(0, e) for e in _entries_from_list(path, data)]
    elif path.suffix in (".yaml", ".yml") or stripped.startswith("- ") or stripped.startswith("images:"):
        try:
            data = YAML(typ="safe").load(text)
        except YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            raise BadInput(f"{path}:{mark.line + 1 if mark else '?'}: invalid YAML: "
                           f"{getattr(err, 'problem', None) or err}") from None
        entries = [(0, e) for e in _entries_from_list(path, data or [])]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append((n, line))
    tags: set[str] = set()
    for n, entry in entries:
        where = f"{path}:{n}" if n else str(path)
        if any(c.isspace() for c in entry.strip()):
            raise BadInput(f"{where}: {entry!r} is not a tag or image reference")
        try:
            tags.add(tag_of(entry))
        except ValueError as err:
            raise BadInput(f"{where}: {entry!r}: {err}") from None
    return tags
