"""A watcher that records every node, PDB and pod change in the lab while a test runs, for invariants afterwards.

It is an ordinary API client (three watches), independent of the code under test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpualign.base.errors import GpualignError

JSON = dict[str, Any]
STATE = "nvidia.com/gpu-driver-upgrade-state"
WALKING = {"cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
           "pod-restart-required", "validation-required", "uncordon-required"}
EVICTING = {"cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required"}


@dataclass
class Change:
    at: float
    kind: str  # node | pdb | pod
    type: str  # ADDED | MODIFIED | DELETED
    name: str
    obj: JSON


@dataclass
class Recorder:
    kube: Any
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    PATHS = {"node": "/api/v1/nodes", "pdb": "/apis/policy/v1/poddisruptionbudgets", "pod": "/api/v1/pods"}

    def start(self, settle: float = 90.0) -> Recorder:
        """settle: first wait (up to that many seconds) until every PDB's workload is rolled out and its status
        agrees with its pods: as many pods as it expects (its controller's scale), all Ready, none terminating or
        counted as disrupted, and the status observed its generation and counts them all healthy. Started earlier,
        the recorder would take a rollout still under way (or the disruption controller's status lagging one) for
        a breach."""
        if settle:
            self.wait_for_settled_pdbs(settle)
        ready = []
        for kind, path in self.PATHS.items():
            started = threading.Event()
            ready.append(started)
            t = threading.Thread(target=self._run, args=(kind, path, started), daemon=True)
            t.start()
            self._threads.append(t)
        for started in ready:
            assert started.wait(30), "recorder did not start"
        return self

    def wait_for_settled_pdbs(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            world = World()
            for pod in self.kube.get_json(self.PATHS["pod"]).get("items") or []:
                world.pods[_name(pod)] = pod
            lagging = []
            for pdb in self.kube.get_json(self.PATHS["pdb"]).get("items") or []:
                st = pdb.get("status") or {}
                selected = world.selected(pdb)
                ready = sum(1 for p in selected if not world.unhealthy_reason(p, {}))
                if st.get("observedGeneration") != pdb["metadata"].get("generation") or \
                        st.get("currentHealthy") != ready or st.get("disruptedPods") or \
                        st.get("expectedPods") != ready or len(selected) != ready:
                    lagging.append(f"{_name(pdb)}: status says {st.get('currentHealthy')} healthy of "
                                   f"{st.get('expectedPods')} expected, {ready} Ready pods of {len(selected)}")
            if not lagging:
                return
            time.sleep(0.25)
        raise AssertionError(f"PDB status never caught up with the pods in {timeout:.0f}s: {lagging}")

    def _run(self, kind: str, path: str, started: threading.Event) -> None:
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = self.kube.get_json(path)
                    rv = listing["metadata"]["resourceVersion"]
                    for obj in listing.get("items") or []:
                        self.changes.append(Change(time.monotonic(), kind, "LISTED", _name(obj), obj))
                    started.set()
                for typ, obj in self.kube.watch_raw(path, resource_version=rv, timeout_seconds=5):
                    if typ == "ERROR":
                        self.errors.append(f"{kind}: watch expired; some changes may be missing")
                        rv = None
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if typ != "BOOKMARK":
                        self.changes.append(Change(time.monotonic(), kind, typ, _name(obj), obj))
                    if self._stop.is_set():
                        return
            except GpualignError as err:
                self.errors.append(f"{kind}: {err.message}")
                time.sleep(0.5)

    def stop(self) -> None:
        time.sleep(1.0)  # let the last events arrive
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)

    def of(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    # -- the invariants ---------------------------------------------------------------------------------------
    def pdb_breaches(self) -> list[str]:
        """Every observed PDB status whose healthy count was below its required count."""
        out = []
        for c in self.of("pdb"):
            st = c.obj.get("status") or {}
            if "currentHealthy" in st and "desiredHealthy" in st and st["currentHealthy"] < st["desiredHealthy"]:
                out.append(f"{c.name}: {st['currentHealthy']} healthy < {st['desiredHealthy']} required")
        return out

    def pods_below_minimum(self) -> list[str]:
        """The same promise, from the pods themselves rather than from the disruption controller's status (which
        lags the pods, and is stale right after a rollout): at every point of the cluster's record, in
        resourceVersion order, the Ready pods a PDB selects that are not terminating numbered at least its last
        known desiredHealthy."""
        out = []
        for c, _before, after in self.replay():
            if c.kind != "pod":
                continue
            for pdb in after.pdbs.values():
                desired = (pdb.get("status") or {}).get("desiredHealthy")
                selected = after.selected(pdb)
                if desired is None or c.obj not in selected and c.type != "DELETED":
                    continue
                ready = sum(1 for p in selected if not after.unhealthy_reason(p, {}))
                if ready < desired:
                    out.append(f"{_name(pdb)} at rv {c.obj['metadata']['resourceVersion']} ({c.type} {c.name}): "
                               f"{ready} Ready pods < {desired} required")
        return out

    def uncordons_of(self, names: set[str]) -> list[str]:
        return [f"{c.name} uncordoned at +{c.at:.1f}" for c in self.of("node")
                if c.name in names and c.type != "DELETED" and not (c.obj.get("spec") or {}).get("unschedulable")]

    def deleted_pods(self) -> set[str]:
        return {c.name for c in self.of("pod") if c.type == "DELETED"}

    def most_walking_at_once(self) -> int:
        current: dict[str, str] = {}
        most = 0
        for c in self.of("node"):
            current[c.name] = ((c.obj.get("metadata") or {}).get("labels") or {}).get(STATE, "")
            most = max(most, sum(1 for s in current.values() if s in WALKING))
        return most


    # -- a consistent cut: every change in resourceVersion order (etcd's one global order across kinds) ---------
    def timeline(self) -> list[Change]:
        """The watched changes (not the initial lists) in resourceVersion order."""
        return sorted((c for c in self.changes if c.type != "LISTED"),
                      key=lambda c: (int(c.obj["metadata"].get("resourceVersion") or 0), c.at))

    def replay(self) -> Iterator[tuple[Change, World, World]]:
        """Each change with the world just before and just after it (nodes, pods, PDBs by name). The initial lists
        come first, as one state: each listed object is yielded with the whole listed world around it."""
        world = World()
        listed = [c for c in self.changes if c.type == "LISTED"]
        for c in listed:
            world.apply(c)
        for c in listed:
            yield c, world, world
        for c in self.timeline():
            before = world.copy()
            world.apply(c)
            yield c, before, world

    def admissions_without_a_free_disruption(self) -> list[str]:
        """PDB-aware admission's promise, checked on the cluster's own record: when a node entered the walk
        (upgrade-required -> cordon-required), every PDB guarding a live pod on it had at least one disruption
        left after the guarded pods still to evict on nodes already in the walk (live, and not yet counted in the
        PDB's status.disruptedPods, where an eviction puts its pod in the same write that spends the disruption),
        and it was not a PDB that can never allow one."""
        out = []
        for c, before, after in self.replay():
            if c.kind != "node" or state_of(c.obj) != "cordon-required" or \
                    state_of(before.nodes.get(c.name)) != "upgrade-required":
                continue
            for pdb in after.pdbs.values():
                if not after.guarded_pods(pdb, c.name):
                    continue
                st = pdb.get("status") or {}
                disrupted = set(st.get("disruptedPods") or {})
                pending = [f"{p['metadata']['name']} on {node} ({state_of(n)}, pod rv "
                           f"{p['metadata'].get('resourceVersion')})"
                           for node, n in after.nodes.items() if node != c.name and state_of(n) in EVICTING
                           for p in after.guarded_pods(pdb, node) if p["metadata"]["name"] not in disrupted]
                allowed = int(st.get("disruptionsAllowed", 0))
                never = st.get("expectedPods", 0) <= st.get("desiredHealthy", 0)
                if allowed - len(pending) < 1 or never:
                    out.append(f"{c.name} admitted at rv {c.obj['metadata']['resourceVersion']} while "
                               f"{_name(pdb)} (status rv {pdb['metadata'].get('resourceVersion')}) allowed {allowed} "
                               f"with {len(pending)} pod(s) still to evict on nodes in the walk: {pending} "
                               f"(expected {st.get('expectedPods')}, desired {st.get('desiredHealthy')})")
        return out

    def breach_evidence(self, limit: int = 3) -> list[str]:
        """For the first few breaching PDB statuses: which of its pods were not healthy at that point, and why."""
        out: list[str] = []
        for c, _before, after in self.replay():
            st = c.obj.get("status") or {}
            if c.kind != "pdb" or not ("currentHealthy" in st and "desiredHealthy" in st) or \
                    st["currentHealthy"] >= st["desiredHealthy"]:
                continue
            why = [f"{_name(p)} on {p['spec'].get('nodeName') or '(unscheduled)'}: {after.unhealthy_reason(p, st)}"
                   for p in after.selected(c.obj) if after.unhealthy_reason(p, st)]
            gone = [f"{n} deleted at rv {rv}" for n, rv in after.deleted.items()
                    if n.startswith(f"{c.obj['metadata']['namespace']}/")][-5:]
            out.append(f"{c.name} at rv {c.obj['metadata']['resourceVersion']}: {st['currentHealthy']} healthy < "
                       f"{st['desiredHealthy']}; not healthy: {why}; recently deleted: {gone}")
            if len(out) >= limit:
                break
        return out


@dataclass
class World:
    nodes: dict[str, JSON] = field(default_factory=dict)
    pods: dict[str, JSON] = field(default_factory=dict)
    pdbs: dict[str, JSON] = field(default_factory=dict)
    deleted: dict[str, str] = field(default_factory=dict)  # pod -> resourceVersion of its deletion

    def copy(self) -> World:
        return World(dict(self.nodes), dict(self.pods), dict(self.pdbs), dict(self.deleted))

    def apply(self, c: Change) -> None:
        store = {"node": self.nodes, "pod": self.pods, "pdb": self.pdbs}[c.kind]
        if c.type == "DELETED":
            store.pop(c.name, None)
            if c.kind == "pod":
                self.deleted[c.name] = str(c.obj["metadata"].get("resourceVersion"))
        else:
            store[c.name] = c.obj

    def selected(self, pdb: JSON) -> list[JSON]:
        ns = pdb["metadata"]["namespace"]
        want = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return [p for p in self.pods.values() if p["metadata"]["namespace"] == ns
                and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())]

    def guarded_pods(self, pdb: JSON, node: str) -> list[JSON]:
        """Live pods (not terminating, not finished) the PDB selects on that node."""
        return [p for p in self.selected(pdb) if (p.get("spec") or {}).get("nodeName") == node
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def unhealthy_reason(self, pod: JSON, pdb_status: JSON) -> str:
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            return "terminating"
        if meta["name"] in (pdb_status.get("disruptedPods") or {}):
            return f"counted as disrupted since {pdb_status['disruptedPods'][meta['name']]}"
        ready = next((cond for cond in status.get("conditions") or [] if cond.get("type") == "Ready"), None)
        if ready and ready.get("status") == "True":
            return ""
        node = self.nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        node_ready = next((cond.get("status") for cond in ((node or {}).get("status") or {}).get("conditions")
                           or [] if cond.get("type") == "Ready"), None)
        return (f"{status.get('phase')}, Ready={ready.get('status') if ready else None}"
                f" ({(ready or {}).get('reason') or 'no reason'}); node Ready={node_ready}")


def state_of(node: JSON | None) -> str:
    return (((node or {}).get("metadata") or {}).get("labels") or {}).get(STATE, "")


def _name(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
