"""A reference evaluator of required nodeAffinity, with the scheduler's semantics (k8s.io/component-helpers
nodeaffinity): terms are ORed, expressions ANDed, Gt/Lt parse the label as an integer, a missing label never
matches Gt/Lt/In/Exists. Used to answer "which nodes can host this" offline, and to test the generated terms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _int(text: str) -> int | None:
    try:
        return int(text, 10)
    except (TypeError, ValueError):
        return None


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], list(expr.get("values") or [])
    present = key in labels
    value = labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        mine, theirs = _int(value or ""), _int(values[0])
        if mine is None or theirs is None:
            return False
        return mine > theirs if op == "Gt" else mine < theirs
    raise ValueError(f"unknown operator {op!r}")


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    exprs = term.get("matchExpressions") or []
    if not exprs and not term.get("matchFields"):
        return False  # an empty term matches nothing
    return all(expression_matches(e, labels) for e in exprs)


def required_matches(node_affinity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(term_matches(t, labels) for t in required.get("nodeSelectorTerms") or [])
