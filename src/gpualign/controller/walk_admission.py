"""The gate's admission on the cluster: the PodDisruptionBudgets as the controller's watch shows them, and the pods
of the node and of the nodes walking, read when a node asks; whether it may join the GPU Operator's walk is decided
by gpualign.upgrade.gate_admission. Nodes are let in one at a time, so two workers never spend the same disruption
twice."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpualign.base.errors import GpualignError
from gpualign.base.json_types import JSON
from gpualign.controller import gate
from gpualign.kube.client import Kube
from gpualign.model.facts import NodeFacts
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import BlockKind
from gpualign.upgrade.gate_admission import Walking, walk_hold
from gpualign.upgrade.planner import BEFORE_EVICTION, Action
from gpualign.upgrade.upgrade_policy import UpgradePolicy

log = logging.getLogger("gpualign.controller")

PDBS = "/apis/policy/v1/poddisruptionbudgets"  # watched by the controller (controller/run.py), read from here
# A node let in counts as walking from the moment the gate lets it in: the node's watch shows the release a moment
# later, and the operator's cordon a moment after that.
LET_IN_FOR = 30.0
LIVE = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass
class WalkAdmission:
    kube: Kube
    nodes: Callable[[], list[NodeFacts]]  # the GPU nodes, as the caches have them
    policy: Callable[[NodeFacts], UpgradePolicy]  # the operator's podDeletion and drain settings for a node
    clock: Callable[[], float] = time.monotonic
    lock: threading.Lock = field(default_factory=threading.Lock)
    let_in: dict[str, float] = field(default_factory=dict)  # node -> when the gate let it in
    # every PodDisruptionBudget, as the controller's watch shows it (namespace/name -> object); None until listed
    pdbs: dict[str, JSON] | None = None

    def sync_pdbs(self, items: list[JSON]) -> None:
        """The PDBs' watch listed them all."""
        with self.lock:
            self.pdbs = {_key(p): p for p in items}

    def pdb_event(self, kind: str, obj: JSON) -> None:
        """One PDB changed (its status too: a budget that grows back)."""
        with self.lock:
            if self.pdbs is None:
                return
            if kind == "DELETED":
                self.pdbs.pop(_key(obj), None)
            else:
                self.pdbs[_key(obj)] = obj

    @contextmanager
    def turn(self) -> Iterator[None]:
        """One admission at a time: the decision and the write that acts on it (PDB events wait for it)."""
        with self.lock:
            yield

    def hold(self, facts: NodeFacts, operator_namespace: str | None) -> Action | None:
        """Why the node may not join the walk now, or None (call within `turn`). An unreadable cluster holds it."""
        now = self.clock()
        self.let_in = {n: t for n, t in self.let_in.items() if now - t < LET_IN_FOR}
        walking = [Walking(f.name, f.unschedulable) for f in self.nodes() if f.name != facts.name and (
            f.labels.get(S.STATE_LABEL) in BEFORE_EVICTION or f.name in self.let_in or (
                f.labels.get(S.STATE_LABEL) == S.REQUIRED and gate.RELEASED in f.annotations
                and f.labels.get(S.SKIP_LABEL) != "true"))]
        if self.pdbs is None:  # fail closed: nothing says the node's pods may leave
            return Action(facts.name, "hold", "held before cordon: the PodDisruptionBudgets have not been read yet",
                          BlockKind.OTHER)
        pdbs = list(self.pdbs.values())
        try:
            pods = []
            for name in (facts.name, *(w.name for w in walking)):
                pods.extend(self.kube.pods(field_selector=f"spec.nodeName={name},{LIVE}"))
        except GpualignError as err:
            return Action(facts.name, "hold", f"held before cordon: its pods could not be read ({err.message})",
                          BlockKind.OTHER)
        return walk_hold(facts.name, unschedulable=facts.unschedulable, walking=walking, pods=pods, pdbs=pdbs,
                         policy=self.policy(facts), operator_namespace=operator_namespace)

    def admitted(self, name: str) -> None:
        """The gate let this node in (call within `turn`, after the write)."""
        self.let_in[name] = self.clock()


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
