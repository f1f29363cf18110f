"""Taint a node's GPUs, not the node: the walk's cordon on a node whose GPUs NVIDIA's DRA driver publishes. Pure.

Kubernetes 1.37 made DRA's device taints and the DeviceTaintRule (resource.k8s.io/v1) GA, on by default. A
DeviceTaintRule with effect NoSchedule on the driver's pool for a node keeps the scheduler from allocating that
node's GPUs to any new claim, while pods without GPU claims keep scheduling there: a driver upgrade stops new GPU work
on the node, not all of it. Pods already holding a claim are moved by the walk as before (pod deletion, PDB-aware),
the driver is restarted and validated, and the rule is deleted.

A node is walked this way when its GPUs are DRA devices (NVIDIA's DRA driver publishes them in its pool) and the
cluster serves DeviceTaintRules; otherwise it is cordoned, as before.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpualign.model.dra_floor import DRIVER
from gpualign.upgrade.gpu_taint import taint_value

API = "/apis/resource.k8s.io/v1"
RULES = f"{API}/devicetaintrules"
KEY = "gpualign.io/driver-upgrade"  # the taint the walk puts on the node's GPUs
PREFIX = "gpualign-upgrade-"
MANAGED = "app.kubernetes.io/managed-by"


def rule_name(node: str) -> str:
    """The node's rule: gpualign-upgrade-NODE, shortened with a hash when a long node name would pass 253."""
    name = f"{PREFIX}{node}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{name[:242]}-{digest}"


def rule(node: str, pool: str, target: str | None) -> dict[str, Any]:
    """The DeviceTaintRule that keeps new claims off the node's GPUs (every device of NVIDIA's driver in its pool)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node), "labels": {MANAGED: "gpualign"},
                         "annotations": {"gpualign.io/node": node, "gpualign.io/upgrade-target": target or ""}},
            "spec": {"deviceSelector": {"driver": DRIVER, "pool": pool},
                     "taint": {"key": KEY, "value": taint_value(target), "effect": "NoSchedule"}}}


def serves_rules(resource_list: Any) -> bool:
    """Whether the cluster's resource.k8s.io/v1 discovery document lists deviceTaintRules."""
    resources = resource_list.get("resources") if isinstance(resource_list, dict) else None
    return any(isinstance(r, dict) and r.get("name") == "devicetaintrules" for r in resources or [])
