"""Required images against the ledger and the driver pods actually running → one finding per GPU node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpualign import labels as L
from gpualign.branches import BranchPolicy
from gpualign.facts import NodeFacts
from gpualign.ledger.sources import Ledger
from gpualign.tags import RequiredImage, Rules, required_image

PRESENT, MISSING, UNKNOWN, HOST = "present", "missing", "unknown", "host-managed"


@dataclass(frozen=True)
class DriverPod:
    """The driver pod seen on a node: its image tag and how it is doing (Running, ImagePullBackOff, …)."""

    name: str
    image: str
    tag: str
    state: str
    ready: bool

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> DriverPod:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        containers = spec.get("containers") or [{}]
        image = str(containers[0].get("image", ""))
        last = image.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        state = str(status.get("phase") or "Unknown")
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                state = str(waiting["reason"])
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return cls(f"{meta.get('namespace')}/{meta.get('name')}", image, tag, state, ready)


@dataclass(frozen=True)
class Finding:
    name: str
    kernel: str | None
    os_tag: str | None
    branch: str | None
    tag: str | None
    image: str | None
    status: str
    published: bool
    reason: str
    driver: str | None = None
    driver_pod: DriverPod | None = None
    pod_matches_kernel: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["driver_pod"] = asdict(self.driver_pod) if self.driver_pod else None
        return d


@dataclass(frozen=True)
class Audit:
    findings: tuple[Finding, ...]
    missing: tuple[tuple[str, str, tuple[str, ...]], ...]  # (tag, image, nodes)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, int]:
        def count(status: str) -> int:
            return sum(1 for f in self.findings if f.status == status)

        return {"gpu_nodes": len(self.findings), "present": count(PRESENT), "missing": count(MISSING),
                "unknown": count(UNKNOWN), "host_managed": count(HOST),
                "pod_kernel_mismatch": sum(1 for f in self.findings if f.pod_matches_kernel is False)}

    @property
    def clean(self) -> bool:
        s = self.summary()
        return s["missing"] == 0 and s["unknown"] == 0 and s["pod_kernel_mismatch"] == 0

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": [f.as_dict() for f in self.findings],
                "missing": [{"tag": t, "image": i, "nodes": list(n)} for t, i, n in self.missing],
                "summary": self.summary()}


def branch_for(facts: NodeFacts, policy: BranchPolicy, pod: DriverPod | None) -> str | None:
    """--driver-branch / policy first; else the branch the node's driver pod is deployed with; else the loaded one."""
    chosen = policy.branch_for(facts.labels)
    if chosen:
        return chosen
    if pod and pod.tag and pod.tag.split("-", 1)[0].isdigit():
        return pod.tag.split("-", 1)[0].split(".")[0]
    return facts.driver.branch if facts.driver else None


def audit(nodes: Iterable[NodeFacts], ledger: Ledger, rules: Rules, policy: BranchPolicy, *,
          repository: str, pods: Mapping[str, DriverPod] | None = None, precompiled: bool = True,
          driver_version: str | None = None) -> Audit:
    """pods: driver pod per node name when a cluster was read (None for a nodes dump: pods unknown)."""
    findings: list[Finding] = []
    for facts in sorted((n for n in nodes if n.gpu), key=lambda n: n.name):
        pod = pods.get(facts.name) if pods is not None else None
        driver = str(facts.driver) if facts.driver else None
        if facts.host_driver or (pods is not None and pod is None and facts.labels.get(L.DEPLOY_DRIVER) != "true"):
            why = "the GPU Operator's driver-deploy label is false" if facts.host_driver else "no driver pod"
            findings.append(Finding(facts.name, facts.kernel, None, None, None, None, HOST, False,
                                    f"driver installed on the host ({why}; driver {driver or 'unknown'}): "
                                    "version management there rests with the team", driver, None))
            continue
        req: RequiredImage = required_image(facts, branch_for(facts, policy, pod), rules, precompiled=precompiled,
                                            driver_version=driver_version)
        if req.tag is None:
            status, reason = UNKNOWN, req.reason
        elif ledger.has(req.tag):
            status, reason = PRESENT, req.reason
        else:
            status = MISSING
            reason = f"image {req.tag} missing from the ledger" + \
                ("" if req.published else f" ({req.reason})")
        matches = None
        if pod is not None and facts.kernel:
            matches = f"-{facts.kernel}-" in f"-{pod.tag}-" or not precompiled
            if not matches:
                reason += f"; driver pod {pod.name} runs {pod.tag or pod.image}, built for another kernel"
        findings.append(Finding(
            facts.name, facts.kernel, req.os_tag, req.branch, req.tag,
            f"{repository}:{req.tag}" if req.tag else None, status, req.published, reason, driver, pod, matches))
    groups: dict[str, list[str]] = {}
    for f in findings:
        if f.status == MISSING and f.tag:
            groups.setdefault(f.tag, []).append(f.name)
    missing = tuple((t, f"{repository}:{t}", tuple(n)) for t, n in sorted(groups.items()))
    return Audit(tuple(findings), missing)
