#!/usr/bin/env python3
"""The values table of charts/gpualign/README.md, generated from values.yaml's `# --` comments (helm-docs style).

    python3 scripts/chart_values_table.py           # print the table
    python3 scripts/chart_values_table.py --write   # rewrite it between the README's markers
    python3 scripts/chart_values_table.py --check   # exit 1 when the README is out of date (a test runs this)

Hand-rolled because helm-docs is a Go tool outside the module proxy's reach here, and this is 60 lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHART = Path(__file__).resolve().parent.parent / "charts" / "gpualign"
BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"
_KEY = re.compile(r"^( *)([A-Za-z][A-Za-z0-9_]*):(.*)$")


def _docs(values_text: str) -> dict[str, tuple[int, str]]:
    """dotted key -> (line, `# --` description) for every documented key."""
    docs: dict[str, tuple[int, str]] = {}
    path: list[str] = []
    doc: list[str] = []
    for n, line in enumerate(values_text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("# --"):
            doc = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if doc:
                doc.append(stripped[1:].strip())
            continue
        m = _KEY.match(line)
        if not m:
            continue
        path = path[: len(m.group(1)) // 2] + [m.group(2)]
        if doc:
            docs[".".join(path)] = (n, " ".join(doc))
        doc = []
    return docs


def rows(values_text: str) -> list[tuple[str, str, str]]:
    """(dotted key, default, description) for every documented key none of whose children is documented (a
    documented mapping whose keys are not is one row, its default the whole mapping). A key that no row covers is an
    error: every value must be documented."""
    import json

    from ruamel.yaml import YAML

    values = YAML(typ="safe").load(values_text) or {}
    docs = _docs(values_text)
    out: list[tuple[str, str, str]] = []

    def walk(node: object, path: list[str]) -> None:
        key = ".".join(path)
        children_documented = isinstance(node, dict) and any(k.startswith(key + ".") for k in docs)
        if key in docs and not children_documented:
            out.append((key, json.dumps(node, separators=(", ", ": ")), docs[key][1]))
            return
        if isinstance(node, dict) and (children_documented or not path):
            for k, v in node.items():
                walk(v, [*path, str(k)])
            return
        raise SystemExit(f"values.yaml: {key} has no `# --` description")

    walk(values, [])
    return out


def table() -> str:
    lines = ["| Key | Default | Description |", "|---|---|---|"]
    for key, default, text in rows((CHART / "values.yaml").read_text()):
        lines.append(f"| `{key}` | `{default}` | {text.replace('|', '/')} |")
    return "\n".join(lines)


def with_table(readme: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    if "--write" in sys.argv:
        readme_path.write_text(with_table(readme))
        return 0
    if "--check" in sys.argv:
        if with_table(readme) != readme:
            print(f"{readme_path}: the values table is out of date: run {sys.argv[0]} --write", file=sys.stderr)
            return 1
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
