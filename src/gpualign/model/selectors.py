"""Kubernetes label selectors (`a=b,c!=d,e in (f,g),!h`), parsed and matched locally.

Hand-written because no maintained Python library parses the kubectl selector grammar; it is small and is
tested against the API server's own answers in the integration tests.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpualign.base.errors import BadInput

_TOKEN = re.compile(r"\s*(?:(!?)([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|"
                    r"\s+(in|notin)\s*\(([^)]*)\))?)\s*(?:,|$)")


@dataclass(frozen=True)
class Selector:
    text: str
    _reqs: tuple[Callable[[Mapping[str, str]], bool], ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req(labels) for req in self._reqs)


def _equals(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) == value


def _differs(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) != value  # a missing key differs, as the API server has it


def _within(key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
    return labels.get(key) in values


def _outside(key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
    return labels.get(key) not in values


def _present(key: str, labels: Mapping[str, str]) -> bool:
    return key in labels


def _absent(key: str, labels: Mapping[str, str]) -> bool:
    return key not in labels


def _diagnose(text: str, pos: int) -> str:
    """Where a requirement starting at `pos` goes wrong, and what was expected there (columns count from 1)."""
    rest = text[pos:]
    start = pos + len(rest) - len(rest.lstrip())
    key = re.compile(r"!?[A-Za-z0-9._/-]+\s*").match(text, start)
    if not key:
        found = repr(text[start]) if start < len(text) else "the end"
        return f"expected a label key at column {start + 1}, found {found}"
    after = key.end()
    setop = re.compile(r"(in|notin)\s*\(").match(text, after)
    if setop and ")" not in text[setop.end():]:
        return f"expected ')' at column {len(text) + 1}"
    op = re.compile(r"(==|=|!=)\s*").match(text, after)
    if op:
        value = re.compile(r"[A-Za-z0-9._-]*\s*").match(text, op.end())
        end = value.end() if value else op.end()
        if value and value.group().strip():
            return f"expected ',' at column {end + 1}, found {text[end]!r}"
        return f"invalid label value at column {end + 1}, found {text[end]!r}"
    return f"expected an operator (=, ==, !=, in, notin) or ',' at column {after + 1}, found {text[after]!r}"


def parse(text: str | None) -> Selector:
    text = (text or "").strip()
    reqs: list[Callable[[Mapping[str, str]], bool]] = []
    if text.endswith(","):
        raise BadInput(f"label selector {text!r}: expected a requirement after ',' at column {len(text) + 1}")
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise BadInput(f"label selector {text!r}: {_diagnose(text, pos)}")
        neg, key, op, value, setop, values = m.groups()
        if neg and (op or setop):
            raise BadInput(f"label selector {text!r}: '!{key}' takes no operator")
        if op in ("=", "=="):
            reqs.append(functools.partial(_equals, key, value))
        elif op == "!=":
            reqs.append(functools.partial(_differs, key, value))
        elif setop:
            vals = frozenset(v.strip() for v in values.split(",") if v.strip())
            reqs.append(functools.partial(_within if setop == "in" else _outside, key, vals))
        elif neg:
            reqs.append(functools.partial(_absent, key))
        else:
            reqs.append(functools.partial(_present, key))
        pos = m.end()
    return Selector(text, tuple(reqs))


def to_label_selector(text: str | None) -> dict[str, object]:
    """The same grammar as parse(), as a metav1.LabelSelector (matchExpressions), e.g. for a namespaceSelector."""
    text = (text or "").strip()
    parse(text)  # validate with the one parser: same errors, same columns
    exprs: list[dict[str, object]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m is not None
        neg, key, op, value, setop, values = m.groups()
        if op in ("=", "=="):
            exprs.append({"key": key, "operator": "In", "values": [value]})
        elif op == "!=":
            exprs.append({"key": key, "operator": "NotIn", "values": [value]})
        elif setop:
            vals = [v.strip() for v in values.split(",") if v.strip()]
            exprs.append({"key": key, "operator": "In" if setop == "in" else "NotIn", "values": vals})
        else:
            exprs.append({"key": key, "operator": "DoesNotExist" if neg else "Exists"})
        pos = m.end()
    return {"matchExpressions": exprs} if exprs else {}
