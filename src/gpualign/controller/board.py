"""The fleet as the board and the metrics show it: pure, from the caches' nodes and the last findings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpualign.base.json_types import JSON
from gpualign.controller import gate
from gpualign.controller.node_finding import NodeFinding
from gpualign.model.audit import Status
from gpualign.model.facts import NodeFacts
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import kind_of
from gpualign.upgrade.clock import since

RUNNING = ("Running", "Pending", "ContainerCreating")  # a driver pod in these states serves, or is about to


def fleet_view(findings: Iterable[NodeFinding], facts: Mapping[str, NodeFacts], *, leader: bool) -> JSON:
    """Counts and lists (cheap at 5,000 nodes: what a metrics scrape reads)."""
    findings = list(findings)
    missing: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for f in findings:
        if f.status in (Status.MISSING, Status.WRONG_IMAGE) and f.tag:
            (missing if f.status == Status.MISSING else wrong).setdefault(f.tag, []).append(f.name)
    counts: dict[str, int] = {}
    blocked: list[tuple[str, str, float]] = []
    kinds: dict[str, str] = {}  # node -> its blocker's kind, as the walk wrote it (gpualign.upgrade.blockers)
    gated: dict[str, str] = {}
    gated_for: dict[str, float] = {}
    gated_by: dict[str, tuple[str, str]] = {}  # node -> (the hold's kind, its PDB)
    for name, nf in facts.items():
        state = nf.labels.get(S.STATE_LABEL) or "none"
        counts[state] = counts.get(state, 0) + 1
        reason = nf.annotations.get(S.BLOCKER)
        if reason:
            blocked.append((name, reason, since(nf.annotations.get(S.BLOCKED_SINCE))))
            kinds[name] = kind_of(reason, nf.annotations.get(S.BLOCKER_KIND))
        if nf.labels.get(S.SKIP_LABEL) == "true" and nf.annotations.get(gate.GATED):
            gated[name] = nf.annotations[gate.GATED]
            gated_for[name] = since(nf.annotations.get(gate.GATED_SINCE))
            gated_by[name] = (nf.annotations.get(gate.GATED_KIND) or gate.IMAGE,
                              nf.annotations.get(gate.GATED_PDB) or "")
    # stuck: the driver is not running (its pod waits in ImagePullBackOff, CrashLoopBackOff, …), or the node is
    # in the walk (cordoned) and something blocks it. A node held before cordon still serves: not stuck.
    no_driver = {f.name: f.pod_state for f in findings if f.pod_state and f.pod_state not in RUNNING}
    stuck = sorted(set(no_driver) | {n for n, _, _ in blocked if facts.get(n) is not None
                                     and facts[n].labels.get(S.STATE_LABEL) in S.IN_PROGRESS})
    return {"nodes": dict(facts), "missing": missing, "wrong": wrong, "upgrade_counts": counts,
            "blocked": sorted(blocked), "blocked_kinds": kinds, "leader": 1 if leader else 0, "stuck": stuck,
            "gated": gated,
            "gated_for": gated_for, "gated_by": gated_by}


def board_view(findings: Iterable[NodeFinding], facts: Mapping[str, NodeFacts], *, leader: bool, updated: str,
               ledger_sources: Iterable[str], cluster: str) -> JSON:
    """The board's page: the fleet view with one row per node."""
    findings = list(findings)
    fleet = fleet_view(findings, facts, leader=leader)
    stuck, gated = set(fleet["stuck"]), fleet["gated"]
    nodes = sorted(({"name": f.name, "kernel": f.kernel, "driver": f.driver, "tag": f.tag,
                     "status": f.status, "pod_state": f.pod_state, "reason": f.reason,
                     "image": f.image, "action": f.to_do,
                     "gated": gated.get(f.name), "stuck": f.name in stuck,
                     "upgrade_state": facts[f.name].labels.get(S.STATE_LABEL) if f.name in facts else None}
                    for f in findings), key=lambda n: n["name"])
    return {"nodes": nodes, "missing": fleet["missing"], "wrong": fleet["wrong"],
            "upgrade_counts": fleet["upgrade_counts"], "blocked": fleet["blocked"], "leader": fleet["leader"],
            "updated": updated, "ledger_sources": list(ledger_sources), "stuck": fleet["stuck"], "gated": gated,
            "cluster": cluster}
