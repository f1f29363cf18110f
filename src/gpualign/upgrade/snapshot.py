"""Read the cluster once per pass: target GPU nodes, their driver pods and pools, and what each node should run.

Requests per pass: one LIST of GPU nodes (label selector), one LIST of driver pods, one LIST of driver DaemonSets
and one LIST of ControllerRevisions per driver namespace; with PDB-aware admission, while some node waits to be
admitted, one LIST of PDBs and one LIST of pods per namespace that has a PDB. Nothing here lists all pods, or
lists pods once per node.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpualign.base import labels as L
from gpualign.base.errors import GpualignError
from gpualign.base.json_types import JSON
from gpualign.kube import dra_reads
from gpualign.kube.client import Kube
from gpualign.kube.node_meta import walk_nodes
from gpualign.ledger.sources import Ledger
from gpualign.model import selectors
from gpualign.model.driver_config import restart_only
from gpualign.model.facts import NodeFacts, node_facts, with_dra_driver
from gpualign.model.image_ref import tag_of
from gpualign.model.tags import Rules, required_image
from gpualign.upgrade import device_taint
from gpualign.upgrade import states as S
from gpualign.upgrade.budget import Budget, demands
from gpualign.upgrade.maintenance import API, holders
from gpualign.upgrade.planner import NodeView

DRIVER_SELECTOR = f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"
HASH_LABEL = "controller-revision-hash"


def image_tag(image: str) -> str:
    return tag_of(image)


@dataclass
class Pool:
    """One driver DaemonSet (one kernel+OS pool in precompiled mode)."""

    obj: JSON
    newest_hash: str | None

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def image(self) -> str:
        containers = self.obj["spec"]["template"]["spec"].get("containers") or [{}]
        return str(containers[0].get("image", ""))

    @property
    def tag(self) -> str:
        return image_tag(self.image)

    def selects(self, labels: Mapping[str, str]) -> bool:
        sel = self.obj["spec"]["template"]["spec"].get("nodeSelector") or {}
        return all(labels.get(k) == v for k, v in sel.items())


@dataclass
class NodeState:
    node: JSON
    facts: NodeFacts
    pod: JSON | None
    pool: Pool | None
    target_tag: str | None
    view: NodeView
    # the pool NVIDIA's DRA driver publishes this node's GPUs in, when the walk taints them rather than cordoning
    # the node (the cluster serves DeviceTaintRules: upgrade/device_taint.py); None: it cordons
    device_pool: str | None = None
    # the taints NVIDIA's DRA driver put on the node's GPUs (health checks): "gpu-0 gpu.nvidia.com/xid=79:NoSchedule"
    gpu_taints: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.facts.annotations)

    @property
    def driver_tolerations(self) -> list[Any] | None:
        """The tolerations of the node's driver DaemonSet's pods, None when no pool is known."""
        if self.pool is None:
            return None
        return list((self.pool.obj["spec"]["template"].get("spec") or {}).get("tolerations") or [])


@dataclass
class Snapshot:
    nodes: dict[str, NodeState]
    pools: list[Pool]
    taken: float = field(default_factory=time.time)
    budgets: dict[str, Budget] | None = None  # PDB budgets, read when admission is PDB-aware and someone waits


def read_budgets(kube: Kube, snap: Snapshot) -> None:
    """Fill in the PDBs' budgets and each node's demand on them (for nodes waiting to start, or still to evict)."""
    pdbs = kube.list_raw("/apis/policy/v1/poddisruptionbudgets")
    pods: list[JSON] = []
    for ns in sorted({p["metadata"]["namespace"] for p in pdbs}):
        pods.extend(kube.pods(ns, field_selector="status.phase!=Succeeded,status.phase!=Failed"))
    need = demands(pdbs, pods)
    snap.budgets = {b.name: b for b in map(Budget.from_pdb, pdbs)}
    for name, state in snap.nodes.items():
        if name in need and not state.view.restart_only:  # a restart in place evicts nothing
            state.view = replace(state.view, pdb_demand=tuple(sorted(need[name].items())))


def _serves_device_taints(kube: Kube) -> bool:
    """Whether the cluster serves DeviceTaintRules (resource.k8s.io/v1, GA in Kubernetes 1.37): one discovery read."""
    try:
        return device_taint.serves_rules(kube.get(device_taint.API))
    except GpualignError:
        return False


def waiting_to_start(snap: Snapshot) -> bool:
    return any(s.view.needs_upgrade and s.view.state in (S.UNKNOWN, S.DONE, S.REQUIRED) for s in snap.nodes.values())


def _ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _newest_hashes(kube: Kube, namespaces: set[str]) -> dict[str, str]:
    """DaemonSet uid → controller-revision-hash of its newest ControllerRevision."""
    best: dict[str, tuple[int, str]] = {}
    for ns in namespaces:
        for rev in kube.list_raw(f"/apis/apps/v1/namespaces/{ns}/controllerrevisions"):
            for owner in rev["metadata"].get("ownerReferences") or []:
                if owner.get("kind") == "DaemonSet":
                    h = (rev["metadata"].get("labels") or {}).get(HASH_LABEL, "")
                    if owner["uid"] not in best or rev.get("revision", 0) > best[owner["uid"]][0]:
                        best[owner["uid"]] = (int(rev.get("revision", 0)), h)
    return {uid: h for uid, (_, h) in best.items()}


def target_selector(selector: str | None) -> str:
    """The nodes a walk may touch, as far as a label selector can say: not a host-managed driver. Whether a node is
    a GPU node is decided on its labels and driver pod after the LIST (`is_walked`): no selector can ask for one
    label or another."""
    base = f"{L.DEPLOY_DRIVER}!=false"
    return f"{base},{selector}" if selector else base


def is_walked(facts: NodeFacts, driver_pods: Mapping[str, Any]) -> bool:
    """A GPU node (gpualign.model.facts.GPU_LABELS), or a node running a GPU Operator driver pod."""
    return facts.gpu or facts.name in driver_pods


def _maintenance(kube: Kube) -> dict[str, str]:
    """node -> who holds it for maintenance; {} where the maintenance operator's API is not served or not readable."""
    resp = kube.request("GET", API)
    if resp.status_code != 200:
        return {}
    return holders(resp.json().get("items") or [])


def _driver_pods(kube: Kube) -> dict[str, JSON]:
    pods: dict[str, JSON] = {}
    for page in kube.list_pages("/api/v1/pods", label_selector=DRIVER_SELECTOR):
        for driver_pod in page:
            node = (driver_pod.get("spec") or {}).get("nodeName")
            if node and not driver_pod["metadata"].get("deletionTimestamp"):
                pods[node] = driver_pod
    return pods


def _pools(kube: Kube) -> list[Pool]:
    daemonsets = kube.list_raw("/apis/apps/v1/daemonsets", label_selector=DRIVER_SELECTOR)
    hashes = _newest_hashes(kube, {d["metadata"]["namespace"] for d in daemonsets})
    return [Pool(d, hashes.get(d["metadata"]["uid"])) for d in daemonsets]


def _walk_nodes(body: bytes) -> list[JSON]:
    """A page of nodes holding only what a snapshot reads (gpualign.kube.node_meta); a page of another shape whole."""
    import msgspec
    import orjson

    try:
        return walk_nodes(body)
    except msgspec.ValidationError:
        return list(orjson.loads(body).get("items") or [])


def take(kube: Kube, selector: str | None, *, ledger: Ledger | None, rules: Rules,
         to_branch: str | None, budgets: bool = False, walk_target: bool = False) -> Snapshot:
    """budgets: also read the PDBs (PDB-aware admission), when some node waits to start. The driver pods and pools
    are read while the nodes are. walk_target (status, why): without to_branch, a node in gpualign's walk is
    judged against the walk's own target (its gpualign.io/upgrade-target), not its DaemonSet's image, which the
    walk may not have repointed yet."""
    from concurrent.futures import ThreadPoolExecutor

    selectors.parse(selector)

    with ThreadPoolExecutor(4, thread_name_prefix="gpualign-snapshot") as reads:
        driver_pods = reads.submit(_driver_pods, kube)
        driver_pools = reads.submit(_pools, kube)
        slices = reads.submit(dra_reads.read, kube)  # a node without GFD labels has its driver there
        held = reads.submit(_maintenance, kube)  # NodeMaintenance objects: another walker's nodes
        nodes = [n for page in kube.list_pages("/api/v1/nodes", label_selector=target_selector(selector),
                                               decode=_walk_nodes) for n in page]
        pods, pools = driver_pods.result(), driver_pools.result()
        devices = slices.result()
        dra = devices.drivers
        maintained = held.result()
    taints_devices = bool(devices.by_node) and _serves_device_taints(kube)
    states: dict[str, NodeState] = {}
    for node in nodes:
        facts = with_dra_driver(node_facts(node), dra)
        if not is_walked(facts, pods):
            continue
        pod = pods.get(facts.name)
        pool = next((p for p in pools if p.selects(facts.labels)), None)
        pod_tag = image_tag(pod["spec"]["containers"][0]["image"]) if pod else None
        pod_hash = (pod["metadata"].get("labels") or {}).get(HASH_LABEL) if pod else None
        if to_branch:
            target = required_image(facts, to_branch, rules).tag
            needs = pod is None or pod_tag != target or (pool is not None and pod_hash != pool.newest_hash)
        else:
            walking = facts.annotations.get(S.TARGET) if walk_target and \
                facts.labels.get(S.STATE_LABEL, S.UNKNOWN) not in (S.UNKNOWN, S.DONE) else None
            target = walking or (pool.tag if pool else None)
            needs = pod is None or (pool is not None and pod_hash != pool.newest_hash) or \
                (walking is not None and pod_tag != walking)
        in_place = bool(needs and pod is not None and pool is not None and pod_tag == target and
                        restart_only(pod.get("spec"), pool.obj["spec"]["template"].get("spec")))
        ann = facts.annotations
        view = NodeView(
            name=facts.name,
            state=facts.labels.get(S.STATE_LABEL, S.UNKNOWN),
            unschedulable=facts.unschedulable or S.DEVICE_TAINT in ann,  # its GPUs tainted: unavailable as cordoned
            ready=_ready(node),
            skip=facts.labels.get(S.SKIP_LABEL) == "true",
            initial_unschedulable=ann.get(S.INITIAL_UNSCHEDULABLE),
            needs_upgrade=needs,
            image_present=bool(target) and (ledger is None or ledger.has(target or "")),
            target_tag=target,
            image_problem=ledger.wrong(target) if ledger is not None and target else None,
            maintenance=maintained.get(facts.name),
            restart_only=in_place,
        )
        pools_of = {d.pool for d in devices.by_node.get(facts.name, ()) if d.pool}
        device_pool = next(iter(pools_of)) if taints_devices and len(pools_of) == 1 else None
        tainted = tuple(f"{d.name} {t}" for d in devices.by_node.get(facts.name, ()) for t in d.taints)
        states[facts.name] = NodeState(node=node, facts=facts, pod=pod, pool=pool, target_tag=target, view=view,
                                       device_pool=device_pool, gpu_taints=tainted)
    snap = Snapshot(states, pools)
    if budgets and waiting_to_start(snap):
        read_budgets(kube, snap)
    return snap
