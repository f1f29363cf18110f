"""`gpualign rules`: the image naming rules check and plan follow, built in or as overridden."""

from __future__ import annotations

import sys

import typer

from gpualign.cli.common import emit_data
from gpualign.cli.options import Output, RulesOpt


def rules_cmd(rules: RulesOpt = None) -> None:
    """Print the image naming rules check and plan follow: the built-in ones, or with --rules FILE, the result of
    overriding them (each section the file gives replaces the built-in section).

    Example:

    \b
        gpualign rules > my-rules.yaml      # edit a section, then: gpualign check --rules my-rules.yaml …
    """
    from importlib import resources

    if rules is None:
        sys.stdout.write(resources.files("gpualign.rules").joinpath("driver_images.yaml").read_text())
        return
    from gpualign.tags import load_rules, merged_rules

    load_rules(rules)  # validated as check would
    emit_data(merged_rules(rules), Output.yaml)


def register(app: typer.Typer) -> None:
    app.command("rules", short_help="Print the image naming rules check and plan follow.")(rules_cmd)
