"""Before any node is touched: is every target image in the ledger, and would a PDB refuse the evictions?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpualign.kube import Kube
from gpualign.upgrade import pods as P
from gpualign.upgrade.snapshot import Snapshot

JSON = dict[str, Any]


@dataclass(frozen=True)
class PdbVerdict:
    pdb: str
    numbers: str
    disruptions_allowed: int
    pods: tuple[tuple[str, str], ...]  # (pod, node)

    @property
    def blocked_nodes(self) -> list[str]:
        """Nodes holding more of its pods than the budget allows to disrupt now (all are evicted together)."""
        per_node: dict[str, int] = {}
        for _, node in self.pods:
            per_node[node] = per_node.get(node, 0) + 1
        return sorted(n for n, c in per_node.items() if c > self.disruptions_allowed)


@dataclass(frozen=True)
class Preflight:
    upgrades: tuple[str, ...]
    already_done: tuple[str, ...]
    missing_images: tuple[tuple[str, str], ...]  # (node, tag)
    pdbs: tuple[PdbVerdict, ...]
    gpu_pods: dict[str, list[str]]

    @property
    def blocked_nodes(self) -> list[str]:
        return sorted({n for v in self.pdbs for n in v.blocked_nodes})

    @property
    def clean(self) -> bool:
        return not self.missing_images and not self.blocked_nodes

    def as_dict(self) -> dict[str, Any]:
        return {"upgrades": list(self.upgrades), "already_done": list(self.already_done),
                "missing_images": [{"node": n, "tag": t} for n, t in self.missing_images],
                "pdbs": [{"pdb": v.pdb, "status": v.numbers, "disruptions_allowed": v.disruptions_allowed,
                          "pods": [{"pod": p, "node": n} for p, n in v.pods], "blocked_nodes": v.blocked_nodes}
                         for v in self.pdbs],
                "gpu_pods": self.gpu_pods, "blocked_nodes": self.blocked_nodes}


def preflight(kube: Kube, snap: Snapshot, *, drain: bool, drain_selector: str = "") -> Preflight:
    """One LIST of pods and one of PDBs for the whole fleet (never one per node)."""
    todo = sorted(n for n, s in snap.nodes.items() if s.view.needs_upgrade)
    done = sorted(n for n, s in snap.nodes.items() if not s.view.needs_upgrade)
    missing = tuple((n, snap.nodes[n].target_tag or "?") for n in todo if not snap.nodes[n].view.image_present)
    movable = set(todo) - {n for n, _ in missing}
    by_node: dict[str, list[JSON]] = {}
    for pod in kube.pods(field_selector="status.phase!=Succeeded,status.phase!=Failed"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node in movable:
            by_node.setdefault(node, []).append(pod)
    victims = {n: P.to_move(ps, drain=drain, selector=drain_selector) for n, ps in by_node.items()}
    pdbs = kube.list_raw("/apis/policy/v1/poddisruptionbudgets")
    verdicts = []
    for pdb in pdbs:
        guarded = tuple((P.name(p), n) for n, ps in sorted(victims.items()) for p in ps if P.pdbs_for(p, [pdb]))
        if guarded:
            allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
            verdicts.append(PdbVerdict(P.name(pdb), P.pdb_numbers(pdb), allowed, guarded))
    return Preflight(tuple(todo), tuple(done), missing, tuple(verdicts),
                     {n: [P.name(p) for p in ps] for n, ps in sorted(victims.items())})
