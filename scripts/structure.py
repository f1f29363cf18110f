"""gpualign's structure, read from its source with the standard library: files, lines, import levels and any import
that runs upward against the rooms' order. The import-rule test (tests/unit/test_import_rule.py) asserts on the same
reading.

    python3 scripts/structure.py            # the table
    python3 scripts/structure.py --json     # the same, as JSON
    python3 scripts/structure.py -v         # every item of every count

Besides the rooms and their order, it counts what keeps the house from being clean: import cycles (over every
import, type-only ones too), places that parse a sentence gpualign wrote, cli/'s imports of the transport clients,
model/'s impurities, exit-code literals outside base/errors.py, own-module imports inside functions outside cli/,
image references split by hand outside model/, constructors called with more than five positional arguments,
string compares with a word of gpualign's vocabulary (a StrEnum's value), functions over 80 lines, and the longest
functions.

Every import counts: at module level, inside functions, and under TYPE_CHECKING (a type is a dependency too).
A module's room is its folder under gpualign/ (base, model, loaders, ledger, kube, ensure, upgrade, usecases,
controller, lab, cli; rules holds only data); `gpualign/__main__.py` is `main`, and the package itself (its version)
`base`.
No module lives outside a room. An import is upward when it reaches a room later in ORDER than its own.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "gpualign"
# Bottom to top: a room imports only from its own and the rooms before it.
ORDER = ("rules", "base", "model", "loaders", "ledger", "kube", "archive", "judging", "ensure", "upgrade", "usecases",
         "controller", "lab", "cli", "main")


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


def _imported(node: ast.AST, known: set[str]) -> list[str]:
    """The gpualign modules an import statement imports, each resolved to a known module."""
    names: list[str] = []
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpualign":
        # `from gpualign.ensure import image` imports gpualign.ensure.image;
        # `from gpualign.kube.client import Kube`, gpualign.kube.client
        names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known] \
            or [node.module]
    elif isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.split(".")[0] == "gpualign"]
    resolved = []
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        resolved.append(name)
    return resolved


def imports(path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every gpualign import in the file, resolved to a known module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        for name in _imported(node, known):
            yield getattr(node, "lineno", 0), name


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


def _runtime_imports(path: Path, known: set[str], *, types_too: bool = False) -> Iterator[tuple[int, str, bool]]:
    """(line, module, inside a function) for every gpualign import the file runs (and with types_too those under
    TYPE_CHECKING, which are types only: still an arrow between two modules)."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    inner: set[int] = set()
    for node in ast.walk(tree):
        if not types_too and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in _imported(node, known):
            yield node.lineno, name, id(node) in inner


def cycles(src: Path = SRC, *, types_too: bool = True) -> list[list[str]]:
    """The import cycles among the modules, over every import (at module level, in functions, and with types_too
    the type-only ones under TYPE_CHECKING): each strongly connected set of more than one module (Tarjan's
    algorithm), sorted."""
    found = modules(src)
    known = set(found)
    g = {n: sorted({t for _, t, _ in _runtime_imports(p, known, types_too=types_too)
                    if t != n and t in known and t != "gpualign"})
         for n, p in found.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    sys.setrecursionlimit(10_000)
    for v in g:
        if v not in index:
            visit(v)
    return sorted(out)


def inner_imports(src: Path = SRC) -> list[str]:
    """Imports of gpualign's own modules inside functions, outside cli/ (whose commands load lazily)."""
    found = modules(src)
    known = set(found)
    return [f"{p.relative_to(src.parent)}:{line}: {t}" for n, p in found.items() if room(n, src) != "cli"
            for line, t, inner in _runtime_imports(p, known) if inner]


_SENTENCE = ("reason", "message", "blocker", "why", "hold", "told", "problem")


def _phrase(arg: ast.expr) -> bool:
    """A constant named in capitals (HOLDS_TOLD), or a string literal holding a space or ': ', or a tuple of them."""
    if isinstance(arg, ast.Tuple):
        return any(_phrase(e) for e in arg.elts)
    if isinstance(arg, ast.Name):
        return arg.id.isupper()
    return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (" " in arg.value or ": " in arg.value)


def sentence_parsing(src: Path = SRC) -> list[str]:
    """Places that take apart a sentence gpualign wrote: startswith / endswith / removeprefix / removesuffix / split
    / partition, called on something named like a sentence (reason, message, blocker, why, hold, told, problem) with a
    phrase (a constant in capitals, or a literal holding a space). A heuristic: what a reader would call parsing
    English, not a test of input (a tag, a path, a kubelet's word)."""
    out = []
    for p in modules(src).values():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in
                    ("startswith", "endswith", "removeprefix", "removesuffix", "split", "partition")):
                continue
            receiver = ast.unparse(node.func.value).lower()
            if any(word in receiver for word in _SENTENCE) and node.args and _phrase(node.args[0]):
                out.append(f"{p.relative_to(src.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return sorted(out)


TRANSPORT = ("gpualign.kube.client", "gpualign.ledger.registry", "gpualign.ledger.transport",
             "gpualign.ledger.exchange")


def cli_transport_imports(src: Path = SRC) -> list[str]:
    """Imports from cli/ of the transport clients themselves (the Kubernetes and registry clients)."""
    paths = modules(src)
    return [f"{paths[n].relative_to(src.parent)}:{line}: {t}" for n, edges in graph(src).items()
            if room(n, src) == "cli" for t, line in edges.items() if t in TRANSPORT]


def impure_model(src: Path = SRC) -> list[str]:
    """model/'s imports of rooms above it, and its file reads (open, read_text, read_bytes)."""
    paths = modules(src)
    rank = {r: i for i, r in enumerate(ORDER)}
    out = [f"{paths[n].relative_to(src.parent)}:{line}: imports {t}" for n, edges in graph(src).items()
           if room(n, src) == "model" for t, line in edges.items() if rank.get(room(t, src), 0) > rank["model"]
           or room(t, src) == "ledger"]
    for n, p in paths.items():
        if room(n, src) != "model":
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and (
                    (isinstance(node.func, ast.Name) and node.func.id == "open") or
                    (isinstance(node.func, ast.Attribute) and node.func.attr in ("read_text", "read_bytes"))):
                out.append(f"{p.relative_to(src.parent)}:{node.lineno}: {ast.unparse(node)[:60]}")
    return out


def _exit_literal(node: ast.AST) -> bool:
    """`exit_code = N`, or `Exit(N)` / `exit(N)` / `SystemExit(N)`, with N a literal other than 0."""
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "exit_code" for t in node.targets) and \
            isinstance(node.value, ast.Constant) and bool(node.value.value)
    if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("Exit", "exit", "SystemExit"):
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int) \
            and bool(node.args[0].value)
    return False


def exit_code_literals(src: Path = SRC, home: str = "gpualign.base.errors") -> list[str]:
    """Exit codes written as numbers outside the error module."""
    return sorted(f"{p.relative_to(src.parent)}:{node.lineno}: {ast.unparse(node)}"
                  for n, p in modules(src).items() if n != home
                  for node in ast.walk(ast.parse(p.read_text(), str(p))) if _exit_literal(node))


def longest_functions(src: Path = SRC, count: int = 15) -> list[tuple[int, str]]:
    """The `count` longest functions (lines, `path:line name`)."""
    found = []
    for _, p in modules(src).items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((length, f"{p.relative_to(src.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)[:count]


def long_functions(src: Path = SRC, over: int = 80) -> list[str]:
    """Every function longer than `over` lines (issue 73's goal: at most 2)."""
    return [f"{n:4} {where}" for n, where in longest_functions(src, count=10_000) if n > over]


# An image reference split by hand (its tag or repository cut off with a string method) instead of through
# model/'s reference values: `ref.rsplit(":", 1)`, `ref.partition(":")`, `ref.split("@")`, ...
_SPLITTERS = ("rsplit", "split", "partition", "rpartition")
_SEPARATORS = (":", "@")


def hand_splits(src: Path = SRC) -> list[str]:
    """String splits on ':' or '@' outside model/ and ledger/references.py: an image reference or a tag parsed
    again by hand (issue 73's goal: at most 4). A split of another kind of text on ':' is counted too: the reading
    cannot tell, and `-v` lists each place to judge."""
    out = []
    for n, p in modules(src).items():
        rel = str(p.relative_to(src.parent))
        if room(n, src) == "model" or rel.endswith("ledger/references.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in _SPLITTERS and node.args and isinstance(node.args[0], ast.Constant) and \
                    node.args[0].value in _SEPARATORS:
                out.append(f"{rel}:{node.lineno}: .{node.func.attr}({node.args[0].value!r})")
    return out


# The functions that convert a kernel's spelling or read its release: outside model/, a kernel goes through
# model.kernels.Kernel (made once where it is read: `Kernel.of`, `Kernel.from_label`, a TagSpec's `kernel_value`)
_SPELLINGS = ("label_of", "release_of", "kernel_arch", "debian_release")


def kernel_spellings(src: Path = SRC) -> list[str]:
    """Calls of a kernel-spelling function (label_of, release_of, kernel_arch, debian_release) or a `+`/`_` swap
    outside model/: a kernel's name converted at the call site instead of read from its `Kernel` value (issue 73)."""
    out = []
    for n, p in modules(src).items():
        if room(n, src) == "model":
            continue
        rel = str(p.relative_to(src.parent))
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            swap = name == "replace" and len(node.args) == 2 and \
                {getattr(a, "value", None) for a in node.args} == {"+", "_"}
            if name in _SPELLINGS or swap:
                out.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
    return out


def reports_printed_by_hand(src: Path = SRC) -> list[str]:
    """Reports (gpualign's versioned documents, `report(...)`) printed outside cli/printers.py: a command that
    renders its own formats instead of declaring its printers (issue 73)."""
    out = []
    for _, p in modules(src).items():
        rel = str(p.relative_to(src.parent))
        if rel.endswith("cli/printers.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "emit_data" and node.args \
                    and isinstance(node.args[0], ast.Call) and ast.unparse(node.args[0].func) == "report":
                out.append(f"{rel}:{node.lineno}: emit_data(report(...))")
    return out


def environment_reads(src: Path = SRC) -> list[str]:
    """Reads of the environment outside cli/ and lab/ (`os.environ.get`, `os.environ[...]`, `os.getenv`, `in
    os.environ`): a setting the command line should read once and hand on (issue 73), or another tool's convention
    read where it is used (KUBECONFIG, DOCKER_CONFIG, SSL_CERT_FILE)."""
    out = []
    for n, p in modules(src).items():
        if room(n, src) in ("cli", "lab"):
            continue
        rel = str(p.relative_to(src.parent))
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if _reads_environment(node):
                out.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:70]}")
    return sorted(out, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


def _reads_environment(node: ast.AST) -> bool:
    def environ(e: ast.AST) -> bool:
        return ast.unparse(e) == "os.environ"

    if isinstance(node, ast.Call):
        return ast.unparse(node.func) in ("os.environ.get", "os.getenv")
    if isinstance(node, ast.Subscript):
        return environ(node.value) and isinstance(node.ctx, ast.Load)
    return isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators)


def positional_constructors(src: Path = SRC, over: int = 5) -> list[str]:
    """Calls of a capitalised name (a class, by the house's naming) with more than `over` positional arguments:
    a value built by position, which a reordered field silently breaks (issue 73: by keyword)."""
    out = []
    for _, p in modules(src).items():
        rel = str(p.relative_to(src.parent))
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Call) and len(node.args) > over:
                name = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else ""
                if name[:1].isupper():
                    out.append(f"{rel}:{node.lineno}: {name} with {len(node.args)} positional arguments")
    return out


def vocabulary(src: Path = SRC) -> dict[str, set[str]]:
    """gpualign's vocabulary: every value of its StrEnums -> the enums that hold it."""
    out: dict[str, set[str]] = {}
    for _, p in modules(src).items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ClassDef) and \
                    any(ast.unparse(b) in ("StrEnum", "enum.StrEnum") for b in node.bases):
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant) and \
                            isinstance(item.value.value, str):
                        out.setdefault(item.value.value, set()).add(node.name)
    return out


def vocabulary_compares(src: Path = SRC) -> list[str]:
    """Comparisons with a string literal that is a word of gpualign's vocabulary: `x == "open"`, `x != "none"`,
    `x in ("build", "render")`: a StrEnum's value spelled as a string where its member belongs (issue 73: none).
    A key or substring test (`"branch" in mapping`) is not a comparison of words, nor is the empty string. A word
    that is also another vocabulary's (a Kubernetes phase, say) is counted: `-v` lists each place."""
    words = vocabulary(src)
    words.pop("", None)
    out = []
    for _, p in modules(src).items():
        rel = str(p.relative_to(src.parent))
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.Compare):
                continue
            said: list[str] = []
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    compared = [left, right]
                elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.Set, ast.List)):
                    compared = list(right.elts)
                else:
                    continue
                said += [e.value for e in compared if isinstance(e, ast.Constant) and isinstance(e.value, str)
                         and e.value in words]
            if said:
                held = sorted(set().union(*(words[w] for w in said)))
                out.append(f"{rel}:{node.lineno}: {', '.join(repr(w) for w in said)} ({', '.join(held)})")
    return out


_FLAG = re.compile(r"(?:^|[\s(`'\"])(--[a-z][a-z-]+)")


_SPEAKERS = ("warn", "warning", "say", "progress", "info", "error", "print", "told")


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's, with {} for each value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                       for v in node.values)
    return None


def flag_words(src: Path = SRC) -> list[str]:
    """Messages outside cli/ and lab/ that tell the user to pass one of the command's flags: a string in what a
    `raise` raises, or in a call that speaks to a user (warn, say, progress, a log line), naming `--flag` other than
    inside a whole command line (`gpualign ensure TAG --render DIR`, `kubectl drain --force` name another command,
    and are advice anywhere). The edge's words in a lower room. A flag handed to a tool (buildah, skopeo) is not a
    message and is not counted."""
    out = set()
    for n, p in modules(src).items():
        if room(n, src) in ("cli", "lab", "main"):
            continue
        tree = ast.parse(p.read_text(), str(p))
        spoken: list[ast.AST] = [node.exc for node in ast.walk(tree) if isinstance(node, ast.Raise) and node.exc]
        spoken += [node for node in ast.walk(tree) if isinstance(node, ast.Call) and
                   (node.func.attr if isinstance(node.func, ast.Attribute) else
                    node.func.id if isinstance(node.func, ast.Name) else "") in _SPEAKERS]
        for top in spoken:
            for node in ast.walk(top):
                text = _text(node)
                if text is None or isinstance(node, ast.Constant) and _inside_fstring(node, top):
                    continue
                commands = [m.span() for m in _COMMAND.finditer(text)]
                for m in _FLAG.finditer(text):
                    if not any(a <= m.start(1) < b for a, b in commands):
                        out.add(f"{p.relative_to(src.parent)}:{node.lineno}: {m.group(1)}")
    return sorted(out)


_COMMAND = re.compile(r"(?:gpualign|kubectl|cosign|helm) [^`;()]*")


def _inside_fstring(node: ast.AST, top: ast.AST) -> bool:
    return any(isinstance(j, ast.JoinedStr) and node in j.values for j in ast.walk(top))


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
            "imports_from_cli_outside_cli": [u for u in upward(src) if "(cli)" in u.split(" imports ")[1]],
            "cycles": cycles(src), "inner_imports_outside_cli": inner_imports(src),
            "sentence_parsing": sentence_parsing(src), "cli_transport_imports": cli_transport_imports(src),
            "impure_model": impure_model(src), "exit_code_literals": exit_code_literals(src),
            "flag_words_outside_cli": flag_words(src), "hand_splits_outside_model": hand_splits(src),
            "kernel_spellings_outside_model": kernel_spellings(src),
            "reports_printed_by_hand": reports_printed_by_hand(src),
            "environment_reads_outside_cli": environment_reads(src),
            "positional_constructors": positional_constructors(src), "vocabulary_compares": vocabulary_compares(src),
            "functions_over_80_lines": long_functions(src),
            "longest_functions": [f"{n:4} {where}" for n, where in longest_functions(src)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", "-v", action="store_true", help="list every item, not only the counts")
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
    found_cycles = s["cycles"]
    assert isinstance(found_cycles, list)
    print(f"import cycles (type-only imports counted): {len(found_cycles)}")
    for c in found_cycles:
        print(f"  {' -> '.join(c)}")
    for key, title, show in (("sentence_parsing", "places that parse a sentence gpualign wrote", True),
                             ("cli_transport_imports", "cli/ imports of the transport clients", args.verbose),
                             ("impure_model", "model/ imports of upper rooms and file reads", True),
                             ("exit_code_literals", "exit-code literals outside base/errors.py", True),
                             ("inner_imports_outside_cli", "own-module imports inside functions, outside cli/",
                              args.verbose),
                             ("flag_words_outside_cli", "messages naming a flag, outside cli/ and lab/",
                              args.verbose),
                             ("hand_splits_outside_model", "splits on ':' or '@' outside model/ (references "
                              "parsed by hand)", args.verbose),
                             ("reports_printed_by_hand", "reports printed outside their command's printers",
                              args.verbose),
                             ("environment_reads_outside_cli", "environment reads outside cli/ and lab/",
                              args.verbose),
                             ("kernel_spellings_outside_model", "kernel spellings converted outside model/ (not "
                              "through its Kernel value)", args.verbose),
                             ("positional_constructors", "constructors called with more than 5 positional "
                              "arguments", args.verbose),
                             ("vocabulary_compares", "string compares with a word of gpualign's vocabulary (a "
                              "StrEnum's value)", args.verbose),
                             ("functions_over_80_lines", "functions over 80 lines", True)):
        items = s[key]
        assert isinstance(items, list)
        print(f"{title}: {len(items)}")
        for item in items if show else []:
            print(f"  {item}")
    print("longest functions:")
    for item in s["longest_functions"]:  # type: ignore[attr-defined]
        print(f"  {item}")
    return 1 if ups or found_cycles else 0


if __name__ == "__main__":
    raise SystemExit(main())
