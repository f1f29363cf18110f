"""`gpualign rules`: the image naming rules check and plan follow, built in or as overridden."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpualign.cli.common import emit_data
from gpualign.cli.options import Output, RulesOpt
from gpualign.cli.printers import Printers

DocumentOutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", metavar="FORMAT", help="yaml (the document, with its comments and sources) or json")]


def rules_cmd(rules: RulesOpt = None, output: DocumentOutputOpt = Output.yaml) -> None:
    """Print the image naming rules check and plan follow: the built-in ones, or with --rules FILE, the result of
    overriding them (each section the file gives replaces the built-in section).

    Example:

    \b
        gpualign rules > my-rules.yaml      # edit a section, then: gpualign check --rules my-rules.yaml …
    """
    from importlib import resources

    RULES.refuse_unless_allowed(output)
    if output is Output.json:
        from gpualign.base import yamlio
        from gpualign.loaders.rules import load_rules, merged_rules

        if rules is not None:
            load_rules(rules)  # validated as check would
            emit_data(merged_rules(rules), Output.json)
        else:
            path = resources.files("gpualign.rules").joinpath("driver_images.yaml")
            emit_data(yamlio.parse(path.read_text(), "driver_images.yaml"), Output.json)
        return
    if rules is None:  # YAML: the file itself, with its comments and sources
        sys.stdout.write(resources.files("gpualign.rules").joinpath("driver_images.yaml").read_text())
        return
    from gpualign.loaders.rules import load_rules, merged_rules

    load_rules(rules)  # validated as check would
    emit_data(merged_rules(rules), Output.yaml)


def register(app: typer.Typer) -> None:
    app.command("rules", short_help="Print the image naming rules check and plan follow.")(rules_cmd)


RULES = Printers(command="rules", table_refused="the rules are a document, printed as YAML (the default, with its "
                                                "comments and sources) or JSON (-o json)")
