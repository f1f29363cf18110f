"""`gpualign cuda …`."""

from __future__ import annotations

import typer

app = typer.Typer(help="CUDA forward-compatibility gate: nodeAffinity on the GFD driver labels.", no_args_is_help=True)
