"""Before any node is touched: is every target image in the ledger, and would a PDB refuse the evictions?"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gpualign.base.json_types import JSON
from gpualign.kube.client import Kube
from gpualign.upgrade import pods as P
from gpualign.upgrade.budget import Budget
from gpualign.upgrade.snapshot import Snapshot
from gpualign.upgrade.upgrade_policy import UpgradePolicy


@dataclass(frozen=True)
class PdbVerdict:
    pdb: str
    numbers: str
    disruptions_allowed: int
    pods: tuple[tuple[str, str], ...]  # (pod, node)
    never: bool = False  # it can never allow a disruption (minAvailable equal to its pods, maxUnavailable 0)

    @property
    def blocked_nodes(self) -> list[str]:
        """Nodes whose pods it guards cannot leave now, not even one after another: it allows no disruption now
        (or never will). A PDB allowing one lets every node's pods go, one after another, node after node."""
        if self.disruptions_allowed >= 1 and not self.never:
            return []
        return sorted({node for _, node in self.pods})

    @property
    def one_by_one(self) -> bool:
        """Some node holds more of its pods than it allows at once: they leave one after another."""
        per_node: dict[str, int] = {}
        for _, node in self.pods:
            per_node[node] = per_node.get(node, 0) + 1
        return any(c > self.disruptions_allowed for c in per_node.values())


@dataclass(frozen=True)
class Preflight:
    upgrades: tuple[str, ...]
    already_done: tuple[str, ...]
    missing_images: tuple[tuple[str, str], ...]  # (node, tag)
    pdbs: tuple[PdbVerdict, ...]
    gpu_pods: dict[str, list[str]]
    unmovable: dict[str, list[str]] = field(default_factory=dict)  # node -> pods kubectl drain would refuse, why

    @property
    def blocked_nodes(self) -> list[str]:
        return sorted({n for v in self.pdbs for n in v.blocked_nodes})

    @property
    def clean(self) -> bool:
        return not self.missing_images and not self.blocked_nodes and not self.unmovable

    def as_dict(self) -> dict[str, Any]:
        return {"upgrades": list(self.upgrades), "already_done": list(self.already_done),
                "missing_images": [{"node": n, "tag": t} for n, t in self.missing_images],
                "pdbs": [{"pdb": v.pdb, "status": v.numbers, "disruptions_allowed": v.disruptions_allowed,
                          "never_allows": v.never,
                          "pods": [{"pod": p, "node": n} for p, n in v.pods], "blocked_nodes": v.blocked_nodes}
                         for v in self.pdbs],
                "gpu_pods": self.gpu_pods, "blocked_nodes": self.blocked_nodes,
                "unmovable_pods": self.unmovable}


def preflight(kube: Kube, snap: Snapshot, policy: UpgradePolicy) -> Preflight:
    """One LIST of pods and one of PDBs for the whole fleet (never one per node). A node with a pod kubectl drain
    would refuse to evict (see pods.drain_refusal) is marked in the snapshot, so the plan holds it before cordon."""
    drain, drain_selector = policy.drain.enable, policy.drain.pod_selector
    todo = sorted(n for n, s in snap.nodes.items() if s.view.needs_upgrade)
    done = sorted(n for n, s in snap.nodes.items() if not s.view.needs_upgrade)
    missing = tuple((n, snap.nodes[n].target_tag or "?") for n in todo if not snap.nodes[n].view.image_present)
    movable = set(todo) - {n for n, _ in missing}
    # every node to upgrade, its image missing or not: the pods it will have to evict and the PDBs that will hold
    # them are the plan's real blockers once the image exists (a plan made without them misses them)
    by_node: dict[str, list[JSON]] = {}
    upgrading = set(todo)
    for pod in kube.pods(field_selector="status.phase!=Succeeded,status.phase!=Failed"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node in upgrading:
            by_node.setdefault(node, []).append(pod)
    victims = {n: P.to_move(ps, drain=drain, selector=drain_selector) for n, ps in by_node.items()}
    unmovable = {n: why for n, ps in sorted(by_node.items()) if n in movable and (why := P.unmovable(
        ps, policy, snap.nodes[n].driver_tolerations))}
    for n, why in unmovable.items():
        snap.nodes[n].view = replace(snap.nodes[n].view, unmovable=tuple(why))
    pdbs = kube.list_raw("/apis/policy/v1/poddisruptionbudgets")
    verdicts = []
    for pdb in pdbs:
        guarded = tuple((P.name(p), n) for n, ps in sorted(victims.items()) for p in ps if P.pdbs_for(p, [pdb]))
        if guarded:
            budget = Budget.from_pdb(pdb)
            verdicts.append(PdbVerdict(P.name(pdb), P.pdb_numbers(pdb), budget.allowed, guarded, budget.never_allows))
    return Preflight(upgrades=tuple(todo), already_done=tuple(done), missing_images=missing, pdbs=tuple(verdicts),
                     gpu_pods={n: [P.name(p) for p in ps] for n, ps in sorted(victims.items())}, unmovable=unmovable)
