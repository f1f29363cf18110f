"""PDB-aware admission's inputs: how many disruptions each node's evictable pods would ask of each
PodDisruptionBudget, and how many each allows now. Pure functions on dicts.

A node is cordoned only when its evictions can complete one after another, as `kubectl drain` would complete them:
every PDB guarding the pods pod-deletion would evict from it has at least one disruption free that no node already
in the walk has spoken for, and is not one that can never allow a disruption (minAvailable equal to its pods). A
node needing more than a PDB allows at once is still admitted: its pods leave one by one, each eviction after the
previous pod's replacement became healthy. Otherwise it stays schedulable at upgrade-required, and the next pass
looks again: budgets grow back as replacement pods become healthy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpualign.base.json_types import ReadOnlyJSON as JSON
from gpualign.upgrade import pods as P


@dataclass(frozen=True)
class Budget:
    """One PDB's status, as the disruption controller last wrote it."""

    name: str  # namespace/name
    allowed: int  # status.disruptionsAllowed
    healthy: int | None = None  # status.currentHealthy
    desired: int | None = None  # status.desiredHealthy
    expected: int | None = None  # status.expectedPods

    @property
    def never_allows(self) -> bool:
        """True when even with every pod healthy it would allow no disruption (minAvailable equal to the pods,
        maxUnavailable 0): no sequential drain can ever move one of its pods."""
        return self.expected is not None and self.desired is not None and self.expected <= self.desired

    @classmethod
    def from_pdb(cls, pdb: JSON) -> Budget:
        st = pdb.get("status") or {}

        def num(key: str) -> int | None:
            value = st.get(key)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(P.name(pdb), max(0, num("disruptionsAllowed") or 0), num("currentHealthy"), num("desiredHealthy"),
                   num("expectedPods"))

    def numbers(self) -> str:
        plural = "" if self.allowed == 1 else "s"
        text = (f"allows {self.allowed} disruption{plural} ({self.healthy if self.healthy is not None else '?'} "
                f"healthy, {self.desired if self.desired is not None else '?'} required)")
        if self.never_allows:
            text += f", and never will: it requires {self.desired} of its {self.expected} pods"
        return text


def demands(pdbs: Iterable[JSON], pods: Iterable[JSON]) -> dict[str, dict[str, int]]:
    """node -> {PDB: how many of the pods pod-deletion would evict from that node the PDB guards}. A pod two PDBs
    select counts against both (the Eviction API then refuses it with 500 anyway)."""
    listed = list(pdbs)
    out: dict[str, dict[str, int]] = {}
    for pod in P.to_move(pods, drain=False):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        for pdb in P.pdbs_for(pod, listed):
            per_node = out.setdefault(str(node), {})
            per_node[P.name(pdb)] = per_node.get(P.name(pdb), 0) + 1
    return out
