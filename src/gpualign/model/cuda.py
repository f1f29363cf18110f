"""CUDA is forward-compatible only: a toolkit needs a minimum driver. Table lookup and nodeAffinity terms.

Node affinity compares integers only (Gt/Lt), and label values can be zero-padded ("06") or empty, so equality
on a version part is written as `Gt n-1` plus `Lt n+1`, never as a string `In`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from ruamel.yaml import YAML

from gpualign import rules as data_files
from gpualign.base import labels as L
from gpualign.base.errors import BadInput
from gpualign.model.version import DriverVersion

LabelSet = Literal["legacy", "current", "both"]
_CUDA = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class CudaTable:
    minimum: dict[str, DriverVersion]
    updates: dict[str, dict[int, DriverVersion]]
    floors: dict[str, DriverVersion]

    @property
    def known(self) -> list[str]:
        return sorted(self.minimum, key=lambda v: tuple(int(p) for p in v.split(".")))


def _floor(text: str) -> DriverVersion:
    return DriverVersion.parse(text) if "." in text else DriverVersion(int(text), 0, None)


@cache
def table() -> CudaTable:
    data = YAML(typ="safe").load(data_files.text("cuda.yaml"))
    updates = {str(k): {int(u.lstrip("U")): DriverVersion.parse(str(v)) for u, v in ups.items()}
               for k, ups in (data.get("updates") or {}).items()}
    return CudaTable(
        minimum={str(k): DriverVersion.parse(str(v)) for k, v in data["minimum_driver"].items()},
        updates=updates,
        floors={str(k): _floor(str(v)) for k, v in data["minor_compat_floor"].items()},
    )


def minimum_driver(cuda: str, *, minor_compat: bool = False) -> DriverVersion:
    """'12.4' → 550.54.14; '12.4.1' → Update 1's 550.54.15; with minor_compat, the major's floor (525.60.13)."""
    t = table()
    m = _CUDA.fullmatch(cuda.strip())
    if not m or f"{m.group(1)}.{m.group(2)}" not in t.minimum:
        raise BadInput(f"unknown CUDA version {cuda!r}; known: {', '.join(t.known)}")
    major, minor, patch = m.group(1), f"{m.group(1)}.{m.group(2)}", int(m.group(3) or 0)
    if minor_compat:
        return t.floors[major]
    ups = {u: v for u, v in t.updates.get(minor, {}).items() if u <= patch}
    return ups[max(ups)] if ups else t.minimum[minor]


def _label_names(which: LabelSet) -> list[dict[str, str]]:
    return {"legacy": [L.DRIVER_LEGACY], "current": [L.DRIVER_CURRENT],
            "both": [L.DRIVER_CURRENT, L.DRIVER_LEGACY]}[which]


def _expr(key: str, op: str, value: int) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": [str(value)]}


def _equal(key: str, value: int) -> list[dict[str, Any]]:
    return [_expr(key, "Gt", value - 1), _expr(key, "Lt", value + 1)]


def selector_terms(minimum: DriverVersion, which: LabelSet = "both") -> list[dict[str, Any]]:
    """ORed nodeSelectorTerms admitting exactly the nodes whose driver is >= minimum (to the revision)."""
    terms: list[dict[str, Any]] = []
    for names in _label_names(which):
        major, minor, rev = names["major"], names["minor"], names["rev"]
        terms.append({"matchExpressions": [_expr(major, "Gt", minimum.major)]})
        if minimum.rev is None:
            terms.append({"matchExpressions": [*_equal(major, minimum.major), _expr(minor, "Gt", minimum.minor - 1)]})
        else:
            terms.append({"matchExpressions": [*_equal(major, minimum.major), _expr(minor, "Gt", minimum.minor)]})
            terms.append({"matchExpressions": [*_equal(major, minimum.major), *_equal(minor, minimum.minor),
                                               _expr(rev, "Gt", minimum.rev - 1)]})
    return terms


def node_affinity(minimum: DriverVersion, which: LabelSet = "both") -> dict[str, Any]:
    """The value of spec.affinity.nodeAffinity."""
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector_terms(minimum, which)}}


DRIVER_KEYS = frozenset(k for names in (L.DRIVER_LEGACY, L.DRIVER_CURRENT) for k in names.values())
