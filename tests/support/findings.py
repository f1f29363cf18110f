"""Findings as the audit makes them (gpualign.model.audit.Finding) and as the controller keeps them (NodeFinding),
for the controller's parts: a node's tag, its status and who makes its image, the rest as the audit leaves it."""

from __future__ import annotations

from gpualign.controller.node_finding import NodeFinding
from gpualign.model.audit import Finding, Status
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.makers import Maker, Making
from gpualign.usecases.archive_next import PoolNext

REPO = "registry.example/nvidia/driver"


def finding(tag: str | None, status: Status = Status.MISSING, *, name: str = "n1", action: str | None = None,
            image: str | None = None, reason: str = "", why: str = "", arch: str | None = None,
            modules: str | None = None, driver_pod: DriverPod | None = None, kernel: str | None = None) -> Finding:
    """action: who makes a missing image (build, the default; mirror; render or none, with `why`)."""
    making = Making(Maker(action), why) if action in (Maker.RENDER, Maker.NONE) else None
    return Finding(name, kernel, None, tag.split("-", 1)[0] if tag else None, tag,
                   image if image is not None else f"{REPO}:{tag}" if tag else None, status,
                   action == Maker.MIRROR, reason, driver_pod=driver_pod, arch=arch, making=making, modules=modules)


def node_finding(tag: str | None, status: Status = Status.MISSING, *, pod_state: str | None = None,
                 upgrade_state: str | None = None, pool: PoolNext | None = None, **fields: object) -> NodeFinding:
    return NodeFinding.of(finding(tag, status, **fields), upgrade_state=upgrade_state,  # type: ignore[arg-type]
                          pod_state=pod_state, pool=pool)
