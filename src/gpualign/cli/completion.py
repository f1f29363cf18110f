"""`gpualign completion bash|zsh|fish`: the shell completion script, as `kubectl completion` prints its own."""

from __future__ import annotations

import enum
from typing import Annotated

import typer


class Shell(enum.StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion(shell: Annotated[Shell, typer.Argument(metavar="SHELL", help="bash, zsh or fish")]) -> None:
    """Print the shell completion script for gpualign.

    Load it in the current shell, or add the line to your shell's start-up file:

    \b
        source <(gpualign completion bash)           # bash (~/.bashrc)
        source <(gpualign completion zsh)            # zsh (~/.zshrc)
        gpualign completion fish | source            # fish (~/.config/fish/config.fish)
    """
    from typer._completion_classes import completion_init
    from typer._completion_shared import get_completion_script

    from gpualign.cli.errors import COMPLETE_VAR

    completion_init()
    print(get_completion_script(prog_name="gpualign", complete_var=COMPLETE_VAR, shell=shell.value))


def register(root: typer.Typer) -> None:
    root.command("completion", short_help="Print the shell completion script (bash, zsh or fish).")(completion)
