"""Versioned data files: OS-tag rules, NVIDIA's published precompiled matrix, and the CUDA→driver table."""

from __future__ import annotations

import os


def text(name: str) -> str:
    """A data file's text. Read beside this module when the package is installed as files (every wheel install):
    importlib.resources, for a package inside a zip, costs every command its readers and zipfile at import (and
    pathlib, `--version` its start-up)."""
    here = os.path.join(os.path.dirname(__file__), name)
    if os.path.isfile(here):
        with open(here, encoding="utf-8") as handle:
            return handle.read()
    from importlib import resources

    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
