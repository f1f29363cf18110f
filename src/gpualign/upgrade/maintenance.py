"""NVIDIA's maintenance operator, as another walker to stay behind. Pure.

In k8s-operator-libs' requestor mode (the Network Operator switches it on; the GPU Operator does not), an operator
asks for a node's maintenance by creating a NodeMaintenance (`maintenance.nvidia.com/v1alpha1`: `spec.nodeName`,
`spec.requestorID`, `spec.additionalRequestors`, `spec.cordon`, `spec.drainSpec`, `spec.waitForPodCompletion`), and
NVIDIA's maintenance operator cordons and drains the node for it. While one exists for a node, gpualign neither
cordons nor drains it, and status and why name who holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

API = "/apis/maintenance.nvidia.com/v1alpha1/nodemaintenances"


def holders(objects: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """node -> who holds it for maintenance, in one line (every NodeMaintenance naming it, not being deleted)."""
    out: dict[str, list[str]] = {}
    for obj in objects:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        node = spec.get("nodeName")
        if not node or meta.get("deletionTimestamp"):
            continue
        requestors = [r for r in [spec.get("requestorID"), *(spec.get("additionalRequestors") or [])] if r]
        where = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p) or "?"
        out.setdefault(str(node), []).append(
            f"NodeMaintenance {where} (requestor {', '.join(map(str, requestors)) or 'unnamed'})")
    return {node: "; ".join(found) for node, found in out.items()}
