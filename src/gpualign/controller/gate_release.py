"""Let go of every node the gate holds, on a cluster: the one place that writes the release (the controller with
the gate off, `gpualign gate release`, the Helm chart's uninstall hook)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from gpualign.base.errors import GpualignError
from gpualign.controller import gate
from gpualign.kube.client import Kube

EVENT_RELEASED = "DriverUpgradeReleased"


ARMED_WORDS = "armed: no driver upgrade is asked of it; the gate judges it when the GPU Operator asks"


@dataclass(frozen=True)
class Released:
    node: str
    held_for: str  # the gate's mark: why it held the node
    since: str | None = None  # when the gate took it (RFC 3339)
    armed: bool = False  # the gate's label waits for the next upgrade: nothing is asked of the node yet


def held(kube: Kube, selector: str | None = None) -> list[Released]:
    """The GPU nodes that carry the gate's label or marks now: held (and why), or armed."""
    out = []
    for node in kube.nodes(selector, metadata_only=True):  # the gate's mark is on GPU nodes only
        ann = node["metadata"].get("annotations") or {}
        if gate.GATED in ann:
            out.append(Released(node["metadata"]["name"], ann[gate.GATED], ann.get(gate.GATED_SINCE)))
        elif gate.ARMED in ann:
            out.append(Released(node["metadata"]["name"], ARMED_WORDS, ann.get(gate.ARMED), armed=True))
        elif gate.RELEASED in ann:  # let into a walk: only its mark is left to remove
            out.append(Released(node["metadata"]["name"], "let into the GPU Operator's walk",
                                ann.get(gate.RELEASED), armed=True))
    return sorted(out, key=lambda r: r.node)


def release_node(kube: Kube, name: str, why: str) -> bool:
    """Release one node if the gate holds it (read fresh, patched with its resourceVersion); True if it did."""
    node = kube.get(f"/api/v1/nodes/{name}")
    if node is None:
        return False
    meta = node["metadata"]
    patch = gate.release(meta.get("labels") or {}, meta.get("annotations") or {})
    if patch is None:
        return False
    updated = kube.patch(f"/api/v1/nodes/{name}",
                         {"metadata": {**patch, "resourceVersion": meta["resourceVersion"]}})
    with contextlib.suppress(GpualignError):  # the Event is a courtesy; the label is the release
        kube.event(updated, EVENT_RELEASED, f"released to the GPU Operator's upgrade walk: {why}", warning=False)
    return True
