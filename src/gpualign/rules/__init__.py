"""Versioned data files: OS-tag rules, NVIDIA's published precompiled matrix, and the CUDA→driver table."""

from __future__ import annotations

from pathlib import Path


def text(name: str) -> str:
    """A data file's text. Read beside this module when the package is installed as files (every wheel install):
    importlib.resources, for a package inside a zip, costs every command its readers and zipfile at import."""
    here = Path(__file__).with_name(name)
    if here.is_file():
        return here.read_text(encoding="utf-8")
    from importlib import resources

    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
