"""What `gpualign status` and `gpualign why` read and decide: the cluster's GPU nodes as the driver upgrade sees them
(a snapshot), the blockers the GPU Operator's walk leaves, the controller's image builds, and for `status --tonight`
Debian's next kernels per pool. The build Jobs' reader is given (`read_builds`): it belongs to the controller, which
sits above the use cases. The command line renders what these return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base import labels as L
from gpualign.base.errors import BadInput, GpualignError
from gpualign.kube import dra_reads
from gpualign.kube.client import Kube
from gpualign.kube.inventory import read_operator_config
from gpualign.ledger.sources import Ledger
from gpualign.model.audit import DriverPod
from gpualign.model.dra_devices import GpuDevice, highest_driver
from gpualign.model.facts import NodeFacts, node_facts, with_dra_driver
from gpualign.model.tags import Rules, normalize_branch
from gpualign.upgrade import snapshot
from gpualign.upgrade.observe import derive
from gpualign.upgrade.report import fleet_status, node_status
from gpualign.upgrade.report import why as explain
from gpualign.upgrade.snapshot import Snapshot
from gpualign.usecases import archive_next
from gpualign.usecases import tonight as tonight_pools

BuildsReader = Callable[[Kube], dict[str, str]]  # tag -> its build in one line (controller's jobs_api.read_cluster)


@dataclass(frozen=True)
class Observed:
    snapshot: Snapshot
    derived: dict[str, str]  # node -> the blocker derived for a node the GPU Operator walks
    cluster: dict[str, Any]
    builds: dict[str, str]


def _observe(kube: Kube, selector: str | None, available: Ledger | None, to_branch: str | None, rules: Rules,
             read_builds: BuildsReader, *, builds_always: bool = False, with_builds: bool = False) -> Observed:
    """The snapshot, the blockers derived for nodes the GPU Operator walks, which cluster was read, and the build
    Jobs of the controller's --build (read only when a target image is missing, or when asked)."""
    snap = snapshot.take(kube, selector, ledger=available, rules=rules,
                         to_branch=normalize_branch(to_branch) if to_branch else None, walk_target=True)
    missing = available is not None and any(ns.target_tag and not ns.view.image_present
                                            for ns in snap.nodes.values())
    builds: dict[str, str] = {}
    if missing or with_builds or (builds_always and available is None):
        builds = read_builds(kube)
    return Observed(snap, derive(kube, snap), kube.describe(), builds)



NO_STATE = ("no node carries nvidia.com/gpu-driver-upgrade-state: no upgrade walk has started (`gpualign upgrade` "
            "starts one); where the GPU Operator runs, its ClusterPolicy's driver.upgradePolicy.autoUpgrade being "
            "off also removes these labels")


def status_of(selector: str | None, available: Ledger | None, to_branch: str | None, rules: Rules,
              kubeconfig: str | None, context: str | None, timeout: float | None = None, *,
              read_builds: BuildsReader, tonight: bool = False, docker_config: Path | None = None,
              trusted: tuple[Any, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """`gpualign status`: each GPU node's place in the driver upgrade, its blockers and its image's build (with
    tonight, each Debian pool's next kernel too); and which cluster was read."""
    with Kube(kubeconfig, context, timeout=timeout) as kube:
        seen = _observe(kube, selector, available, to_branch, rules, read_builds, with_builds=tonight)
    snap, derived, cluster, builds = seen.snapshot, seen.derived, seen.cluster, seen.builds
    data = fleet_status(snap, ledger_known=available is not None, derived=derived, builds=builds)
    if snap.nodes and set(data["counts"]) == {"(none)"}:
        data["note"] = NO_STATE
    if tonight:
        data["tonight"], data["reboot"], data["tonight_error"] = _tonight(snap, available, rules, builds,
                                                                          docker_config, trusted)
    return data, cluster


def _tonight(snap: Snapshot, available: Ledger | None, rules: Rules, builds: dict[str, str],
             docker_config: Path | None = None,
             trusted: tuple[Any, ...] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """Each Debian pool's next kernel from the archive, with its image's state, and per node whether it may reboot
    tonight (the same judgement `plan --kernel next` makes); or why the archive was not read (its Debian nodes are
    then held: no judgement covers them)."""
    facts = [ns.facts for ns in snap.nodes.values()]
    pods = {name: DriverPod.from_pod(ns.pod) for name, ns in snap.nodes.items() if ns.pod}
    judged, error = tonight_of(facts, pods, available, rules, builds, docker_config, trusted)
    return ([{**p.as_dict(), "line": p.line()} for p in judged.pools], [v.as_dict() for v in judged.nodes],
            f"Debian's archive not read: {error}" if error else None)


def tonight_of(facts: list[NodeFacts], pods: dict[str, DriverPod], available: Ledger | None, rules: Rules,
               builds: dict[str, str], docker_config: Path | None = None,
               trusted: tuple[Any, ...] = ()) -> tuple[tonight_pools.Judged, str | None]:
    """Per node, may it reboot tonight: the kernel it boots next, its image judged as plan judges it. The archive is
    read when a Debian node is among them; (the judgement, why the archive could not be read)."""
    archive, error = None, None
    if any(f.os_id == "debian" for f in facts):
        error = archive_next.cannot_verify()
        if error is None:
            try:
                archive = archive_next.read(facts, *archive_next.debian_archive())
            except GpualignError as err:
                error = err.message
    return tonight_pools.judge(archive, facts, pods, available, rules, builds, archive_error=error,
                               docker_config=docker_config, trusted=trusted), error


@dataclass(frozen=True)
class Why:
    cluster: dict[str, Any]
    lines: list[str]  # the explanation, in plain words
    status: dict[str, Any] | None  # the node's row of `status -o json`, when a walk applies to it


def why_of(node: str, available: Ledger | None, to_branch: str | None, rules: Rules, kubeconfig: str | None,
           context: str | None, timeout: float | None = None, *, read_builds: BuildsReader, tonight: bool = False,
           docker_config: Path | None = None, trusted: tuple[Any, ...] = ()) -> Why:
    """`gpualign why NODE`: why the node is where it is in the driver upgrade, over one connection; with tonight,
    also whether it may reboot tonight and, if not, why (the judgement `status --tonight` makes)."""
    found = _why_of(node, available, to_branch, rules, kubeconfig, context, timeout, read_builds=read_builds)
    if not tonight or found.facts is None:
        return found.why
    pods = {node: found.pod} if found.pod is not None else {}
    judged, _ = tonight_of([found.facts], pods, available, rules, {}, docker_config, trusted)
    verdict = judged.nodes[0]
    line = f"tonight: {verdict.line().removeprefix(node + ': ')}"
    return Why(found.why.cluster, [*found.why.lines, line],
               {**(found.why.status or {}), "reboot": verdict.as_dict()})


@dataclass(frozen=True)
class _Found:
    why: Why
    facts: NodeFacts | None  # the GPU node, when a walk applies to it
    pod: DriverPod | None


def _why_of(node: str, available: Ledger | None, to_branch: str | None, rules: Rules, kubeconfig: str | None,
            context: str | None, timeout: float | None = None, *, read_builds: BuildsReader) -> _Found:
    with Kube(kubeconfig, context, timeout=timeout) as kube:
        cluster = kube.describe()
        seen = _observe(kube, f"kubernetes.io/hostname={node}" if node else None, available, to_branch, rules,
                        read_builds, builds_always=True)
        ledger_known = available is not None
        ns = seen.snapshot.nodes.get(node)
        if ns is None:
            return _Found(Why(cluster, _why_not_walked(node, kube), None), None, None)
        lines = explain(ns, ledger_known=ledger_known, derived=seen.derived.get(node), builds=seen.builds)
        if ns.facts.driver_from_dra or ns.device_pool is not None:
            lines.extend(device_health(dra_reads.read(kube).by_node.get(node, [])))
        if ns.pod is None and ns.pool is None:
            lines.append(_no_driver_pool(ns, kube))
        status = node_status(ns, ledger_known=ledger_known, derived=seen.derived.get(node),
                             builds=seen.builds).as_dict()
        return _Found(Why(cluster, lines, status), ns.facts, DriverPod.from_pod(ns.pod) if ns.pod else None)


def device_health(devices: list[GpuDevice]) -> list[str]:
    """The taints NVIDIA's DRA driver puts on a node's GPUs (gpu.nvidia.com/xid, gpu-lost, unmonitored: its health
    checks), one line per tainted device: a tainted GPU takes no new claim whatever its driver."""
    return [f"NVIDIA's DRA driver taints {d.name}: {', '.join(d.taints)}" for d in devices if d.taints]


def _no_driver_pool(ns: Any, kube: Kube) -> str:
    """Why no driver DaemonSet selects the node: beside the GPU Operator, the objects it checked and their
    selectors; elsewhere, the node's pool labels."""
    config, _ = read_operator_config(kube, (ns.facts,))
    if config is not None:
        _, why = config.source_for(dict(ns.facts.labels))
        if why:
            return why
    return (f"no driver pod and no driver DaemonSet selects it (kernel {ns.facts.kernel or 'unknown'}, OS "
            f"{ns.facts.os_id or '?'}{ns.facts.os_version or ''}): nothing deploys a driver here")


def _why_not_walked(node: str, kube: Kube) -> list[str]:
    """A node no driver walk applies to, said plainly: not a GPU node, or a driver installed on the host; a node that
    does not exist is an error (exit 2)."""
    obj = kube.get(f"/api/v1/nodes/{node}")
    if obj is None:
        raise BadInput(f"node {node!r} not found")
    facts = node_facts(obj)
    health: list[str] = []
    if facts.gpu and facts.driver is None:  # no GFD label names it: NVIDIA's DRA driver may publish it
        devices = dra_reads.read(kube).by_node.get(node, [])
        found = highest_driver(devices)
        facts = with_dra_driver(facts, {node: found} if found else {})
        health = device_health(devices)
    if not facts.gpu:
        return [f"{node} is not a GPU node (no {L.GPU_PRESENT}=true label, no NVIDIA PCI device labelled by NFD "
                f"({L.PCI_NVIDIA}), and no GPU Operator driver pod): no driver upgrade applies to it."]
    driver = str(facts.driver) if facts.driver else "unknown"
    return [f"{node}'s driver is installed on the host ({L.DEPLOY_DRIVER}=false), version {driver}: the GPU "
            "Operator deploys no driver pod there and no walk applies; upgrade it with the host's own tooling.",
            *health]
