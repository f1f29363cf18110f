"""Shared CLI plumbing: stderr progress and warnings, and the JSON/YAML output. Nothing heavy is imported until used:
rich only to print styled text on a terminal, ruamel.yaml only to print YAML."""

from __future__ import annotations

import sys
from typing import Any

from gpualign.cli.options import Output

__all__ = ["Output", "emit_data", "progress", "say_tty", "stderr", "stdout", "warn"]


class _LazyConsole:
    """A rich Console made on first use."""

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._console: Any = None

    @property
    def console(self) -> Any:
        """The rich Console itself, made on first use."""
        if self._console is None:
            from rich.console import Console

            settings = dict(self._settings)
            if settings.pop("stdout_width", False):
                # Off a terminal rows are never wrapped (like kubectl), so output stays one line per item.
                settings["width"] = None if sys.stdout.isatty() else 400
            self._console = Console(**settings)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


stderr = _LazyConsole(stderr=True, highlight=False)
stdout = _LazyConsole(highlight=False, soft_wrap=True, stdout_width=True)


def progress(message: str) -> None:
    """A progress line on stderr: styled on a terminal, plain otherwise (so logs stay greppable)."""
    if sys.stderr.isatty():
        stderr.print(f"[dim]…[/dim] {message}")
    else:
        print(f"... {message}", file=sys.stderr, flush=True)


def say_tty(text: str) -> None:
    """What was read (a cluster, a file, a ledger): on a terminal only, so pipelines and logs stay clean."""
    if sys.stderr.isatty():
        print(f"gpualign: {text}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"gpualign: warning: {message}", file=sys.stderr, flush=True)


def emit_data(data: Any, fmt: Output) -> None:
    """JSON or YAML on stdout; YAML is plain block style with no anchors or aliases. gpualign's vocabulary (StrEnum)
    is written as its value, as a key too."""
    if fmt is Output.json:
        import orjson

        options = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
        sys.stdout.buffer.write(orjson.dumps(data, option=options))
        sys.stdout.flush()
        return
    import enum

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100000
    yaml.representer.ignore_aliases = lambda *_: True
    yaml.representer.add_multi_representer(  # gpualign's vocabulary (StrEnum) is written as its value
        enum.Enum, lambda rep, member: rep.represent_str(str(member.value)))
    yaml.dump(data, sys.stdout)


API_VERSION = "gpualign.io/v1"


def report(kind: str, source: dict[str, Any], body: dict[str, Any], *, cuda: bool = False) -> dict[str, Any]:
    """A JSON/YAML document in gpualign's versioned envelope: apiVersion and kind first, then where its facts came
    from (cluster or file, ledger sources, and the version of the built-in data it rests on), then the body."""
    from gpualign.model import data_versions

    data = {"cuda_table": data_versions.cuda_table_version()} if cuda else {
        "rules": data_versions.rules_version()}
    return {"apiVersion": API_VERSION, "kind": kind, "source": {**source, "builtin": data,
                                                                **({} if cuda else {"signatures": _signatures()})},
            **body}


def _signatures() -> dict[str, Any]:
    """Whether present images' signatures were checked, and against which keys ($GPUALIGN_TRUSTED_KEYS)."""
    import os

    from gpualign.model.cosign import TRUSTED_ENV  # not judging.signature_check: that loads cryptography

    keys = [k for k in (os.environ.get(TRUSTED_ENV) or "").split(os.pathsep) if k]
    return {"checked": bool(keys), "trusted_keys": keys}
