"""The one YAML reader for every input file: errors become one line naming the file (and line), never ruamel's
multi-line report."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput


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


def read(path: Path, *, as_kubectl: bool = False) -> Any:
    """One YAML document from a file (as_kubectl: read as kubectl reads its kubeconfig, parse_as_kubectl)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text") from None
    return parse_as_kubectl(text, str(path)) if as_kubectl else parse(text, str(path))


def parse_as_kubectl(text: str, where: str) -> Any:
    """One YAML document read as kubectl reads a kubeconfig, by libyaml: every scalar that is not a number or null
    stays text (`on`, `no`, `true` included), because Kubernetes decodes each field by its type; the kubeconfig's
    reader turns its boolean fields into booleans by YAML 1.1's words, as kubectl does (kube.kubeconfig). Every
    command that talks to a cluster reads one, and one can be large (certificates inline, many contexts): libyaml
    parses it in well under a millisecond, where ruamel.yaml's pure-Python parser took ~6 ms for a small one
    (docs/benchmarks.md, "check and why on an API server that is not busy")."""
    import yaml

    try:
        return yaml.load(text, Loader=_text_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark else where
        problem = str(getattr(err, "problem", None) or err).splitlines()[0]
        if "another document" in problem:
            raise BadInput(f"{at}: holds more than one YAML document, where one is expected") from None
        raise BadInput(f"{at}: invalid YAML: {problem}") from None


@functools.cache
def _text_loader() -> Any:
    """libyaml's safe loader (PyYAML's own without libyaml) that resolves no implicit booleans."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader: Any = type("TextLoader", (base,), {})
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in base.yaml_implicit_resolvers.items()}
    return loader


def parse_cached(text: str, where: str, cache: Path) -> Any:
    """parse, for text that holds no secret (gpualign's built-in rules): the parse is kept as JSON in `cache`,
    named by the text's SHA-256, and read back (well under a millisecond) instead of parsed again (ruamel.yaml is
    pure Python: ~25 ms for the rules, and its import ~10 ms, in every read command). Only plain data is kept
    (mappings with string keys, lists, strings, integers, finite floats, booleans, null), so what is read back
    is what parsing gives; a cache that cannot be read or written is parsed past."""
    import hashlib

    import orjson

    path = cache / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        pass
    data = parse(text, where)
    if _plain(data):
        try:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}")
            tmp.write_bytes(orjson.dumps(data))
            os.replace(tmp, path)
        except (OSError, TypeError):
            pass
    return data


def _plain(data: Any) -> bool:
    if data is None or isinstance(data, (str, bool)):
        return True
    if isinstance(data, int):
        return -(2**63) <= data < 2**64
    if isinstance(data, float):
        return math.isfinite(data)
    if isinstance(data, list):
        return all(_plain(x) for x in data)
    if isinstance(data, dict):
        return all(type(k) is str and _plain(v) for k, v in data.items())
    return False
