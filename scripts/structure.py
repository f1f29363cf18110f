"""gpualign's structure, read from its source with the standard library: files, lines, import levels and any import
that runs upward against the rooms' order. The import-rule test (tests/unit/test_import_rule.py) asserts on the same
reading.

    python3 scripts/structure.py            # the table
    python3 scripts/structure.py --json     # the same, as JSON

Every import counts: at module level, inside functions, and under TYPE_CHECKING (a type is a dependency too).
A module's room is its folder under gpualign/ (base, model, kube, ledger, ensure, upgrade, usecases, controller,
lab, cli; rules holds only data); `gpualign/__main__.py` is `main`, and the package itself (its version) `base`.
No module lives outside a room. An import is upward when it reaches a room later in ORDER than its own.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "gpualign"
# Bottom to top: a room imports only from its own and the rooms before it.
ORDER = ("rules", "base", "ledger", "model", "kube", "ensure", "upgrade", "usecases", "controller", "lab", "cli",
         "main")


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str, src: Path = SRC) -> str:
    """The folder a module lives in; a module outside every folder has the room "(top level)", which no ORDER
    holds (test_import_rule fails on it)."""
    parts = module.split(".")
    if len(parts) < 2:
        return "base"  # the package itself: its version
    if (src / parts[1]).is_dir():
        return parts[1]
    if parts[1] == "__main__":
        return "main"
    return "(top level)"


def modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted(src.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every gpualign import in the file, resolved to a known module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpualign":
            # `from gpualign.ensure import image` imports gpualign.ensure.image;
            # `from gpualign.kube.client import Kube`, gpualign.kube.client
            names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known] \
                or [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "gpualign"]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            yield node.lineno, name


def graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the first line importing it}."""
    found = modules(src)
    known = set(found)
    out: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges: dict[str, int] = {}
        for line, target in imports(path, known):
            if target != name and target != "gpualign":
                edges.setdefault(target, line)
        out[name] = edges
    return out


def upward(src: Path = SRC) -> list[str]:
    """Each import reaching a room later in ORDER than its own, as `path:line: a (room) imports b (room)`."""
    rank = {r: i for i, r in enumerate(ORDER)}
    paths = modules(src)
    bad = []
    for name, edges in graph(src).items():
        for target, line in sorted(edges.items(), key=lambda e: e[1]):
            a, b = room(name, src), room(target, src)
            if rank.get(b, len(ORDER)) > rank.get(a, len(ORDER)):
                bad.append(f"{paths[name].relative_to(src.parent)}:{line}: {name} ({a}) imports {target} ({b})")
    return bad


def unknown_rooms(src: Path = SRC) -> list[str]:
    """Rooms that are not in ORDER (a new package must be placed in it)."""
    return sorted({room(m, src) for m in modules(src)} - set(ORDER))


def levels(src: Path = SRC) -> dict[str, int]:
    """Each module's import level: 0 imports no gpualign module, else one more than the highest it imports (a
    cycle counts its modules at one level)."""
    g = graph(src)

    @cache
    def level(name: str, stack: frozenset[str] = frozenset()) -> int:
        below = [t for t in g.get(name, {}) if t not in stack]
        return 1 + max((level(t, stack | {name}) for t in below), default=-1)

    sys.setrecursionlimit(10_000)
    return {name: level(name) for name in g}


def summary(src: Path = SRC) -> dict[str, object]:
    files = modules(src)
    lines = {n: len(p.read_text().splitlines()) for n, p in files.items()}
    per_room: dict[str, dict[str, int]] = {}
    for n in files:
        r = per_room.setdefault(room(n, src), {"files": 0, "lines": 0})
        r["files"] += 1
        r["lines"] += lines[n]
    lv = levels(src)
    return {"files": len(files), "lines": sum(lines.values()), "import_levels": max(lv.values()) + 1,
            "rooms": {r: per_room[r] for r in ORDER if r in per_room}, "upward_imports": upward(src),
            "imports_from_cli_outside_cli": [u for u in upward(src) if "(cli)" in u.split(" imports ")[1]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--src", type=Path, default=SRC, help="the package to read (default: this checkout's)")
    args = ap.parse_args()
    s = summary(args.src)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{s['files']} files, {s['lines']:,} lines, {s['import_levels']} import levels")
    rooms = s["rooms"]
    assert isinstance(rooms, dict)
    for r, v in rooms.items():
        print(f"  {r:11} {v['files']:3} files {v['lines']:6,} lines")
    ups = s["upward_imports"]
    assert isinstance(ups, list)
    print(f"upward imports: {len(ups)}")
    for u in ups:
        print(f"  {u}")
    return 1 if ups else 0


if __name__ == "__main__":
    raise SystemExit(main())
