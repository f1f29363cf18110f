"""The one YAML reader for every input file: errors become one line naming the file (and line), never ruamel's
multi-line report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpualign.errors import BadInput


def _problem(err: Exception) -> str:
    from ruamel.yaml.reader import ReaderError

    if isinstance(err, ReaderError):
        return f"not text: character {err.character!r} at position {err.position}"
    return str(getattr(err, "problem", None) or err).splitlines()[0]


def parse(text: str, where: str, *, documents: bool = False) -> Any:
    """One YAML document (or, with documents=True, the list of them) from text read from `where`."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        yaml = YAML(typ="safe")
        return list(yaml.load_all(text)) if documents else yaml.load(text)
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark else where
        if "another document" in _problem(err):
            raise BadInput(f"{at}: holds more than one YAML document, where one is expected") from None
        raise BadInput(f"{at}: invalid YAML: {_problem(err)}") from None


def read(path: Path) -> Any:
    """One YAML document from a file."""
    try:
        text = path.read_text()
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text") from None
    return parse(text, str(path))
