"""Shared CLI plumbing: stderr progress (only on a terminal), output formats, and common options."""

from __future__ import annotations

import enum
import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from ruamel.yaml import YAML

stderr = Console(stderr=True, highlight=False)
# Off a terminal, rows are never wrapped (like kubectl), so output stays one line per node for grep and awk.
stdout = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 400)


class Output(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table | wide | json | yaml")]
KubeconfigOpt = Annotated[str | None, typer.Option(
    "--kubeconfig", envvar="KUBECONFIG", show_envvar=True,
    help="kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, or in-cluster)")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context to use")]
SelectorOpt = Annotated[str | None, typer.Option("--selector", "-l", help="label selector, e.g. pool=train")]


def progress(message: str) -> None:
    """A progress line on stderr: styled on a terminal, plain otherwise (so logs stay greppable)."""
    if sys.stderr.isatty():
        stderr.print(f"[dim]…[/dim] {message}")
    else:
        print(f"... {message}", file=sys.stderr, flush=True)


def emit_data(data: Any, fmt: Output) -> None:
    if fmt is Output.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    else:
        yaml = YAML()
        yaml.default_flow_style = False
        yaml.dump(data, sys.stdout)
