"""The command group class gpualign's help uses: each command's summary is its whole first sentence, wrapped to the
width, never cut off with "..." (click cuts it at the width, and help must be complete at any width).

Also kubectl's usage style for positional arguments: `why [OPTIONS] NODE`, `[TAG]...`, never typer's `{NODE}` or a
lower-case parameter name."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperGroup


def _kubectl_metavar(self: Any, ctx: Any, *, usage: bool = False) -> str:
    var = self.metavar or (self.name or "").upper()
    if self.nargs != 1 and not var.endswith("..."):
        var += "..."
    if usage and not self.required and not var.startswith("["):
        return f"[{var}]"
    return str(var)


TyperArgument.make_metavar = _kubectl_metavar  # type: ignore[method-assign]


class Group(TyperGroup):
    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
