"""The controller's caches, fed by its watches: GPU nodes, their driver pods, the driver DaemonSets and the
ResourceSlices of NVIDIA's DRA driver (where no gpu-feature-discovery runs, a node's driver version is there).

Each update says which nodes to re-check (the `requeue` given at construction); a node that is gone is re-checked
too, and the check, finding nothing, forgets it.

The caches also remember the controller's own writes to a node until the node's watch shows them: until then the
cached node predates the write, and a decision made from it would only write the same thing again (the expectations
of Kubernetes' own controllers).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpualign.base import labels as L
from gpualign.base.json_types import JSON
from gpualign.model.audit import DriverPod
from gpualign.model.dra_devices import GpuDevice, devices_by_node, highest_driver
from gpualign.model.facts import NodeFacts, node_facts, with_dra_driver
from gpualign.model.image_ref import tag_of
from gpualign.model.object_views import DaemonSet, view
from gpualign.model.version import DriverVersion
from gpualign.upgrade import states as S

# The labels whose change can change a node's finding or the gate's decision: only these re-check a node.
WATCHED_LABELS = (L.KERNEL, L.KERNEL_NEXT, L.OS_NEXT, L.OS_ID, L.OS_VERSION, L.GPU_PRESENT, L.DEPLOY_DRIVER,
                  L.DRIVER_CURRENT_FULL,
                  *L.DRIVER_CURRENT.values(), *L.DRIVER_LEGACY.values(), S.STATE_LABEL, S.SKIP_LABEL)
# How long an own write may stay unseen by the node's watch before the cache is trusted again anyway: a safety net
# (a watch shows a write within milliseconds, and one that lost its connection lists again).
WRITE_SEEN_WITHIN = 10.0
# The resourceVersions a node's watch showed last: a write's answer can come after the watch has shown it (and a
# write that changed nothing has the version already shown), so a write is awaited only when not among them.
RECENT_VERSIONS = 16


@dataclass
class Caches:
    requeue: Callable[[Iterable[str]], None]  # these nodes need a re-check
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    # the nodes no GPU label marks: one that runs a GPU Operator driver pod is a GPU node all the same (the
    # operator's DRA mode labels none), for as long as it runs one
    others: dict[str, NodeFacts] = field(default_factory=dict)
    pods: dict[str, DriverPod] = field(default_factory=dict)  # node -> its driver pod
    pools: dict[str, JSON] = field(default_factory=dict)  # driver DaemonSets by namespace/name
    # NVIDIA's DRA devices: ResourceSlice name -> (its node, the devices it publishes), and node -> the highest
    # driver they publish (a node NVIDIA's DRA driver publishes GPUs for is a GPU node, as one running a driver pod)
    slices: dict[str, tuple[str, list[GpuDevice]]] = field(default_factory=dict)
    dra: dict[str, DriverVersion] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # node -> (the resourceVersion the controller's own write made, when to stop waiting for the watch to show it)
    unseen_writes: dict[str, tuple[str, float]] = field(default_factory=dict)
    shown: dict[str, deque[str]] = field(default_factory=dict)  # node -> the versions its watch showed last
    clock: Callable[[], float] = time.monotonic

    # -- nodes ------------------------------------------------------------------------------------------------------
    def sync_nodes(self, items: list[JSON]) -> None:
        every = list(map(node_facts, items))
        fresh = {f.name: f for f in every if f.gpu}
        with self.lock:
            gone = set(self.nodes) - set(fresh)
            self.nodes = fresh
            self.others = {f.name: f for f in every if not f.gpu}
            self.unseen_writes.clear()  # a list is the present: every write made before it is in it
            self.shown = {}
            for item in items:
                if (item.get("metadata") or {}).get("name") in fresh:
                    self._show(item)
        self.requeue([*fresh, *gone])

    def node_event(self, kind: str, obj: JSON) -> None:
        facts = node_facts(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self.lock:
            old = self.nodes.get(facts.name)
            seen = self.unseen_writes.get(facts.name, ("", 0.0))[0] == version and version is not None
            if seen:
                del self.unseen_writes[facts.name]
            if kind == "DELETED" or not facts.gpu:
                self.nodes.pop(facts.name, None)
                self.unseen_writes.pop(facts.name, None)
                self.shown.pop(facts.name, None)
                if kind == "DELETED":
                    self.others.pop(facts.name, None)
                else:
                    self.others[facts.name] = facts
            else:
                self.others.pop(facts.name, None)
                self.nodes[facts.name] = facts
                self._show(obj)
        if kind == "DELETED" or not facts.gpu:
            self.requeue([facts.name])
            return
        relevant = old is None or any(old.labels.get(k) != facts.labels.get(k) for k in WATCHED_LABELS)
        if relevant or seen:  # a decision deferred while the write was unseen is made now
            self.requeue([facts.name])

    def wrote(self, node: JSON) -> None:
        """The controller wrote this node (`node` as the API answered): its cached copy is stale until the watch
        shows that version."""
        meta = node.get("metadata") or {}
        name, version = meta.get("name"), meta.get("resourceVersion")
        if name and version:
            with self.lock:
                if version not in self.shown.get(name, ()):  # else the watch has shown it already
                    self.unseen_writes[name] = (version, self.clock() + WRITE_SEEN_WITHIN)

    def _show(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        name, version = meta.get("name"), meta.get("resourceVersion")
        if name and version:
            self.shown.setdefault(name, deque(maxlen=RECENT_VERSIONS)).append(version)

    def current(self, name: str) -> bool:
        """Whether the cached node shows every write the controller made to it (or waited long enough)."""
        with self.lock:
            unseen = self.unseen_writes.get(name)
            if unseen is None:
                return True
            if self.clock() >= unseen[1]:
                del self.unseen_writes[name]
                return True
            return False

    def unseen_too_long(self) -> list[str]:
        """The nodes whose write the watch has not shown within WRITE_SEEN_WITHIN: trusted again, and to be checked
        again (a decision deferred for them is made then, though no event came)."""
        now = self.clock()
        with self.lock:
            late = [name for name, (_, deadline) in self.unseen_writes.items() if now >= deadline]
            for name in late:
                del self.unseen_writes[name]
        return late

    def node(self, name: str) -> tuple[NodeFacts | None, DriverPod | None]:
        with self.lock:
            facts, pod = self.nodes.get(name), self.pods.get(name)
            if facts is None and (pod is not None or name in self.dra) and name in self.others:
                facts = dataclasses.replace(self.others[name], gpu=True)
            return (with_dra_driver(facts, self.dra) if facts is not None and self.dra else facts), pod

    def _gpu_nodes(self) -> dict[str, NodeFacts]:
        """The GPU nodes: those a GPU label marks, and those running a driver pod or publishing NVIDIA's DRA devices
        (under the lock)."""
        found = [n for n in (*self.pods, *self.dra) if n in self.others and n not in self.nodes]
        if not found:
            return self.nodes
        return {**self.nodes, **{n: dataclasses.replace(self.others[n], gpu=True) for n in found}}

    def _gpu_facts(self) -> dict[str, NodeFacts]:
        """The GPU nodes, each with the driver its DRA devices publish where no label names one (under the lock;
        only the nodes with DRA devices are copied)."""
        every = dict(self._gpu_nodes())
        for name in self.dra:
            if name in every:
                every[name] = with_dra_driver(every[name], self.dra)
        return every

    def snapshot(self) -> dict[str, NodeFacts]:
        with self.lock:
            return self._gpu_facts()

    def node_list(self) -> list[NodeFacts]:
        with self.lock:
            return list(self._gpu_facts().values())

    def names(self) -> list[str]:
        with self.lock:
            return list(self._gpu_nodes())

    # -- driver pods ------------------------------------------------------------------------------------------------
    def sync_pods(self, items: list[JSON]) -> None:
        with self.lock:
            self.pods = {}
            for pod in items:
                node = (pod.get("spec") or {}).get("nodeName")
                if node and not pod["metadata"].get("deletionTimestamp"):
                    self.pods[node] = DriverPod.from_pod(pod)
        self.requeue(self.names())

    def pod_event(self, kind: str, pod: JSON) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        with self.lock:
            current = self.pods.get(node)
            name = f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                if current and current.name == name:
                    self.pods.pop(node, None)
            else:
                self.pods[node] = DriverPod.from_pod(pod)
        self.requeue([node])

    # -- NVIDIA's DRA devices -------------------------------------------------------------------------------------
    def sync_slices(self, items: list[JSON]) -> None:
        slices = {_slice_name(item): _slice(item) for item in items}
        with self.lock:
            before = self.dra
            self.slices = {k: v for k, v in slices.items() if v is not None}
            self.dra = _drivers(self.slices.values())
        self.requeue(_changed(before, self.dra))

    def slice_event(self, kind: str, obj: JSON) -> None:
        name, found = _slice_name(obj), _slice(obj)
        with self.lock:
            old = self.slices.pop(name, None)
            if kind != "DELETED" and found is not None:
                self.slices[name] = found
            touched = {s[0] for s in (old, found) if s is not None}
            before = {n: self.dra[n] for n in touched if n in self.dra}
            after = _drivers(s for s in self.slices.values() if s[0] in touched)
            for node in touched:
                if node in after:
                    self.dra[node] = after[node]
                else:
                    self.dra.pop(node, None)
        self.requeue(_changed(before, after))

    # -- driver DaemonSets ------------------------------------------------------------------------------------------
    def sync_pools(self, items: list[JSON]) -> None:
        with self.lock:
            self.pools = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in items}
        self.requeue(self.names())

    def pool_event(self, kind: str, ds: JSON) -> None:
        key = f"{ds['metadata']['namespace']}/{ds['metadata']['name']}"
        with self.lock:
            old = self.pools.pop(key, None) if kind == "DELETED" else self.pools.get(key)
            if kind != "DELETED":
                self.pools[key] = ds

        def template(d: JSON | None) -> Any:
            return ((d or {}).get("spec") or {}).get("template")

        if kind == "DELETED" or template(old) != template(ds):  # status-only updates change nothing here
            self.requeue(self.names())

    def pool_list(self) -> list[JSON]:
        with self.lock:
            return list(self.pools.values())

    def pool_branch(self, facts: NodeFacts) -> str | None:
        """The branch the node's driver DaemonSet deploys: known before its pod exists (a brand-new node)."""
        for ds in self.pool_list():
            spec = view(ds, DaemonSet).spec.template.spec
            selector = spec.node_selector
            if selector and all(facts.labels.get(k) == v for k, v in selector.items()):
                image = spec.containers[0].image if spec.containers else ""
                tag = tag_of(image)
                head = tag.split("-", 1)[0].split(".")[0]
                return head if head.isdigit() else None
        return None


def _slice_name(item: JSON) -> str:
    return str((item.get("metadata") or {}).get("name") or "")


def _slice(item: JSON) -> tuple[str, list[GpuDevice]] | None:
    """The node a ResourceSlice of NVIDIA's DRA driver publishes devices for, and those devices; None for any other."""
    by_node = devices_by_node([item])
    return next(iter(by_node.items()), None)


def _drivers(slices: Iterable[tuple[str, list[GpuDevice]]]) -> dict[str, DriverVersion]:
    devices: dict[str, list[GpuDevice]] = {}
    for node, found in slices:
        devices.setdefault(node, []).extend(found)
    return {n: d for n, found in devices.items() if (d := highest_driver(found))}


def _changed(before: dict[str, DriverVersion], after: dict[str, DriverVersion]) -> list[str]:
    """The nodes whose DRA driver the change made, moved or took away."""
    return [n for n in {*before, *after} if before.get(n) != after.get(n)]
