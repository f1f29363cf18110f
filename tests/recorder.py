"""A watcher that records every node, PDB and pod change in the lab while a test runs, for invariants afterwards.

It is an ordinary API client (three watches), independent of the code under test.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from gpualign.errors import GpualignError

JSON = dict[str, Any]
STATE = "nvidia.com/gpu-driver-upgrade-state"
WALKING = {"cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
           "pod-restart-required", "validation-required", "uncordon-required"}


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

    def start(self) -> Recorder:
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


def _name(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
