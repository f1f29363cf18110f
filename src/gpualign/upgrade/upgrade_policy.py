"""DriverUpgradePolicySpec: the operator's field names and defaults, read from YAML, plus gpualign's additions.

Differences from the operator, on purpose:
- `failedNodesHoldSlots` (default true, as the operator) can be set false so failed nodes stop holding the
  parallelism slots of healthy ones; one failure then no longer halts the fleet.
- `validation.timeoutSeconds` (default 600) bounds validation even when no validator pod exists; the operator waits
  forever then (k8s-operator-libs #626).
- `podDeletion.retryDelaySeconds` / `drain.retryDelaySeconds` make the eviction retry delay explicit (5 s, as
  kubectl drain), and a zero timeout is refused: every eviction wait is finite.
- `admission` (default `pdb-aware`): a node is cordoned only when its evictions can complete one after another
  (every PodDisruptionBudget guarding its GPU pods has a disruption that the walk has not spoken for);
  `operator` keeps the operator's order (by name, whatever the PDBs say).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.base.yamlio import read as _read_yaml

PDB_AWARE, OPERATOR_ORDER = "pdb-aware", "operator"
ADMISSIONS = (PDB_AWARE, OPERATOR_ORDER)


@dataclass(frozen=True)
class WaitForCompletion:
    pod_selector: str = ""
    timeout_seconds: int = 0  # 0: wait forever, as the operator


@dataclass(frozen=True)
class PodDeletion:
    force: bool = False
    timeout_seconds: int = 300
    delete_empty_dir: bool = False
    retry_delay_seconds: float = 5.0


@dataclass(frozen=True)
class Drain:
    enable: bool = False
    force: bool = False
    pod_selector: str = ""
    timeout_seconds: int = 300
    delete_empty_dir: bool = False
    retry_delay_seconds: float = 5.0


@dataclass(frozen=True)
class Validation:
    timeout_seconds: int = 600


@dataclass(frozen=True)
class UpgradePolicy:
    max_parallel_upgrades: int = 1  # 0: unlimited
    max_unavailable: str = "25%"
    wait_for_completion: WaitForCompletion = field(default_factory=WaitForCompletion)
    pod_deletion: PodDeletion = field(default_factory=PodDeletion)
    drain: Drain = field(default_factory=Drain)
    validation: Validation = field(default_factory=Validation)
    failed_nodes_hold_slots: bool = True
    eviction_concurrency: int = 8
    admission: str = PDB_AWARE

    def max_unavailable_nodes(self, total: int) -> int:
        """An int, or a percentage of total rounded up (as the operator's intstr scaling)."""
        text = str(self.max_unavailable).strip()
        if text.endswith("%"):
            return math.ceil(total * int(text[:-1]) / 100)
        return int(text)


_FIELDS = {
    "maxParallelUpgrades", "maxUnavailable", "waitForCompletion", "podDeletion", "drain", "validation",
    "failedNodesHoldSlots", "evictionConcurrency", "autoUpgrade", "admission",
}


def _int(where: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInput(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadInput(f"{where}: expected true or false, got {value!r}")
    return value


def _section(where: str, data: Any, allowed: set[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{where}: expected a mapping")
    unknown = set(data) - allowed
    if unknown:
        raise BadInput(f"{where}: unknown field {sorted(unknown)[0]!r} (known: {', '.join(sorted(allowed))})")
    return data


def from_dict(data: Any, source: str = "policy") -> UpgradePolicy:
    d = _section(source, data, _FIELDS)
    mu = d.get("maxUnavailable", "25%")
    if not (isinstance(mu, int) and not isinstance(mu, bool) and mu >= 0) and not (
            isinstance(mu, str) and re.fullmatch(r"\d{1,3}%|\d+", mu)):
        raise BadInput(f"{source}: maxUnavailable: expected an integer or a percentage such as 25%, got {mu!r}")
    w = _section(f"{source}: waitForCompletion", d.get("waitForCompletion"), {"podSelector", "timeoutSeconds"})
    p = _section(f"{source}: podDeletion", d.get("podDeletion"),
                 {"force", "timeoutSeconds", "deleteEmptyDir", "retryDelaySeconds"})
    dr = _section(f"{source}: drain", d.get("drain"),
                  {"enable", "force", "podSelector", "timeoutSeconds", "deleteEmptyDir", "retryDelaySeconds"})
    v = _section(f"{source}: validation", d.get("validation"), {"timeoutSeconds"})
    pod_timeout = _int(f"{source}: podDeletion.timeoutSeconds", p.get("timeoutSeconds", 300), 1)
    drain_timeout = _int(f"{source}: drain.timeoutSeconds", dr.get("timeoutSeconds", 300), 1)

    admission = d.get("admission", PDB_AWARE)
    if admission not in ADMISSIONS:
        raise BadInput(f"{source}: admission: expected {' or '.join(ADMISSIONS)}, got {admission!r}")

    def delay(where: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise BadInput(f"{where}: expected a positive number of seconds, got {value!r}")
        return float(value)

    return UpgradePolicy(
        max_parallel_upgrades=_int(f"{source}: maxParallelUpgrades", d.get("maxParallelUpgrades", 1)),
        max_unavailable=str(mu),
        wait_for_completion=WaitForCompletion(str(w.get("podSelector") or ""),
                                              _int(f"{source}: waitForCompletion.timeoutSeconds",
                                                   w.get("timeoutSeconds", 0))),
        pod_deletion=PodDeletion(_bool(f"{source}: podDeletion.force", p.get("force", False)), pod_timeout,
                                 _bool(f"{source}: podDeletion.deleteEmptyDir", p.get("deleteEmptyDir", False)),
                                 delay(f"{source}: podDeletion.retryDelaySeconds", p.get("retryDelaySeconds", 5))),
        drain=Drain(enable=_bool(f"{source}: drain.enable", dr.get("enable", False)),
                    force=_bool(f"{source}: drain.force", dr.get("force", False)),
                    pod_selector=str(dr.get("podSelector") or ""), timeout_seconds=drain_timeout,
                    delete_empty_dir=_bool(f"{source}: drain.deleteEmptyDir", dr.get("deleteEmptyDir", False)),
                    retry_delay_seconds=delay(f"{source}: drain.retryDelaySeconds", dr.get("retryDelaySeconds", 5))),
        validation=Validation(_int(f"{source}: validation.timeoutSeconds", v.get("timeoutSeconds", 600), 1)),
        failed_nodes_hold_slots=_bool(f"{source}: failedNodesHoldSlots", d.get("failedNodesHoldSlots", True)),
        eviction_concurrency=_int(f"{source}: evictionConcurrency", d.get("evictionConcurrency", 8), 1),
        admission=str(admission),
    )


def load(path: Path) -> UpgradePolicy:
    data = _read_yaml(path)
    if isinstance(data, dict) and "spec" in data and isinstance(data["spec"], dict):  # a ClusterPolicy-like doc
        data = data["spec"].get("driver", {}).get("upgradePolicy", data["spec"].get("upgradePolicy", data))
    return from_dict(data or {}, str(path))
