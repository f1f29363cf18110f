"""The pure planner: a snapshot of the target nodes + the policy → what to do next, node by node.

It decides admission (who may start, within maxParallelUpgrades and maxUnavailable, never without the image, and
by default never when a PodDisruptionBudget could not let the node's evictions complete one after another now)
and the uncordon rule (only nodes gpualign itself cordoned). The per-state work is the executor's; the planner
only says which state handler runs on which node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gpualign.model.ledger import Refusal
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import PDB_WORDS, BlockKind
from gpualign.upgrade.budget import Budget
from gpualign.upgrade.upgrade_policy import PDB_AWARE, UpgradePolicy

UNMOVABLE_HOLD = "held before cordon"  # … when a pod there could not be evicted under the rules of kubectl drain
# States whose node still has its GPU pods to evict: their evictions are spoken for in the PDBs' budgets.
BEFORE_EVICTION = frozenset({S.CORDON, S.WAIT_FOR_JOBS, S.POD_DELETION, S.DRAIN})


@dataclass(frozen=True)
class NodeView:
    """What the planner needs to know of one node; built from labels, annotations and its driver pod."""

    name: str
    state: str
    unschedulable: bool
    ready: bool = True
    skip: bool = False
    initial_unschedulable: str | None = None  # the operator's annotation: "true" / "false" / absent
    needs_upgrade: bool = True  # its driver pod is not the target
    image_present: bool = True
    target_tag: str | None = None
    image_problem: Refusal | None = None  # present under the tag but not what it says (or not verified)
    pdb_demand: tuple[tuple[str, int], ...] = ()  # (PDB, how many of its pods pod-deletion would evict here)
    unmovable: tuple[str, ...] = ()  # pods here the walk may not evict (kubectl drain's rules), each with why
    maintenance: str | None = None  # who holds it for maintenance (a NodeMaintenance: upgrade/maintenance.py)
    # the driver's configuration is unchanged (gpualign.model.driver_config): cordon and restart the pod in place,
    # no pod moved, so neither PDBs nor unmovable pods hold it
    restart_only: bool = False

    @property
    def unavailable(self) -> bool:
        return self.unschedulable or not self.ready


@dataclass(frozen=True)
class Action:
    node: str
    kind: str  # mark-required | start | hold | handle | uncordon | finish | mark-done
    reason: str = ""  # for people
    hold: BlockKind | None = None  # a hold's kind, for the code (gpualign.upgrade.blockers)
    subject: str = ""  # what holds it, where the kind names one: the PDB (namespace/name)


def _holds_slot(n: NodeView, policy: UpgradePolicy) -> bool:
    if n.state == S.FAILED:
        return policy.failed_nodes_hold_slots
    return n.state in S.IN_PROGRESS


def _pdb_hold(n: NodeView, remaining: dict[str, int], budgets: Mapping[str, Budget]) -> tuple[str, str] | None:
    """Why the node's evictions could not complete one after another now, and the PDB; None when they can.

    Held: a PDB that can never allow a disruption (minAvailable equal to its pods), or one with no disruption left
    that nodes already in the walk have not spoken for. Admitted: every other node, even one needing more than a
    PDB allows at once; its pods then leave one by one, as `kubectl drain` moves them."""
    for pdb, need in n.pdb_demand:
        left = remaining.get(pdb)
        if left is None:
            continue
        budget = budgets.get(pdb) or Budget(pdb, 0)
        if not budget.never_allows and left >= 1:
            continue
        taken = budget.allowed - left
        return (f"{PDB_WORDS}: PDB {pdb} {budget.numbers()}"
                + (f"; nodes already in the walk have {taken} of its pods still to evict" if taken > 0 else "")
                + (f"; this node would need {need}" if need > 1 else "")), pdb
    return None


def next_actions(nodes: Iterable[NodeView], policy: UpgradePolicy,
         budgets: Mapping[str, Budget] | None = None) -> list[Action]:
    """budgets: the PDBs' current budgets (by namespace/name), given when admission is PDB-aware; then a node is
    started only if every PDB guarding its pods has a disruption free after the evictions still ahead on nodes
    already in the walk (see _pdb_hold)."""
    # a restart in place evicts nothing: it asks nothing of any PDB
    views = sorted((replace(n, pdb_demand=()) if n.restart_only and n.pdb_demand else n for n in nodes),
                   key=lambda n: n.name)
    actions: list[Action] = []
    in_progress = sum(1 for n in views if _holds_slot(n, policy))
    unavailable = sum(1 for n in views if n.unavailable)
    max_unavailable = policy.max_unavailable_nodes(len(views))
    max_parallel = policy.max_parallel_upgrades or len(views) or 1
    pdb_aware = budgets is not None and policy.admission == PDB_AWARE
    remaining = {name: b.allowed for name, b in (budgets or {}).items()}
    for n in views:
        if n.state in BEFORE_EVICTION:
            for pdb, need in n.pdb_demand:
                if pdb in remaining:
                    remaining[pdb] -= need

    for n in views:
        if n.skip and n.state in (S.UNKNOWN, S.DONE, S.REQUIRED):
            actions.append(Action(n.name, "hold", f"skipped: {S.SKIP_LABEL}=true", BlockKind.SKIPPED))
            continue
        if n.state in (S.UNKNOWN, S.DONE):
            if n.needs_upgrade:
                actions.append(Action(n.name, "mark-required"))
            elif n.state == S.UNKNOWN:
                actions.append(Action(n.name, "mark-done", "driver already the target"))
            continue
        if n.state == S.REQUIRED:
            if not n.needs_upgrade:
                actions.append(Action(n.name, "mark-done", "driver already the target"))
            elif n.maintenance:
                actions.append(Action(n.name, "hold", f"{MAINTENANCE_HOLD}: {n.maintenance}", BlockKind.MAINTENANCE))
            elif not n.image_present:
                actions.append(Action(n.name, "hold", *image_hold(n.target_tag, n.image_problem)))
            elif n.unmovable and not n.restart_only:
                more = f" (and {len(n.unmovable) - 1} more)" if len(n.unmovable) > 1 else ""
                actions.append(Action(n.name, "hold", f"{UNMOVABLE_HOLD}: {n.unmovable[0]}{more}",
                                      BlockKind.UNMOVABLE))
            elif pdb_aware and (held := _pdb_hold(n, remaining, budgets or {})):
                actions.append(Action(n.name, "hold", held[0], BlockKind.PDB, subject=held[1]))
            elif in_progress >= max_parallel:
                actions.append(Action(n.name, "hold",
                                      f"waiting for a slot: {in_progress} of maxParallelUpgrades={max_parallel} "
                                      "in progress", BlockKind.WAITING_FOR_SLOT))
            elif not n.unavailable and unavailable >= max_unavailable:
                actions.append(Action(n.name, "hold",
                                      f"waiting for availability: {unavailable} of maxUnavailable="
                                      f"{max_unavailable} nodes unavailable", BlockKind.WAITING_FOR_SLOT))
            else:
                actions.append(Action(n.name, "start"))
                in_progress += 1
                if not n.unavailable:
                    unavailable += 1
                for pdb, need in n.pdb_demand:
                    if pdb in remaining:
                        remaining[pdb] -= need
            continue
        if n.state in S.MAINTENANCE:
            actions.append(Action(n.name, "hold", "the maintenance operator holds it (a NodeMaintenance, requestor "
                                                  "mode): gpualign neither cordons nor drains behind it",
                                  BlockKind.MAINTENANCE))
            continue
        if n.state == S.UNCORDON:
            if n.initial_unschedulable != "true":  # k8s-operator-libs records only a cordon made before the walk
                actions.append(Action(n.name, "uncordon"))
            else:
                actions.append(Action(n.name, "finish", "was cordoned before the upgrade: left cordoned"))
            continue
        if n.state == S.FAILED:
            actions.append(Action(n.name, "hold", "upgrade-failed: fix the cause, then relabel it upgrade-required",
                                  BlockKind.FAILED))
            continue
        actions.append(Action(n.name, "handle"))
    return actions


MAINTENANCE_HOLD = "held for maintenance, which gpualign neither cordons nor drains behind"


def image_hold(tag: str | None, problem: Refusal | None) -> tuple[str, BlockKind]:
    """Why a node is held for its target image, and the kind: missing, present but wrong, or not verified (asked
    for)."""
    if problem is not None and problem.unverified:
        return (f"image not verified: {tag}: {problem.why} (--no-verify-modules walks on the labels alone)",
                BlockKind.IMAGE_UNVERIFIED)
    if problem is not None:
        return f"image present but wrong: {tag}: {problem.why}", BlockKind.IMAGE_WRONG
    return f"image missing: {tag}", BlockKind.IMAGE_MISSING


def admission_order(nodes: Iterable[NodeView], policy: UpgradePolicy,
                    budgets: Mapping[str, Budget] | None = None) -> tuple[list[list[str]], dict[str, Action]]:
    """What --dry-run shows: the rounds in which the nodes not yet in the walk would be started, supposing the nodes
    already in it and each started round finish, and the PDBs' budgets stay as they are now; and why each other
    node waits. Pure: it replays `next_actions` on the views."""
    def finished(n: NodeView) -> NodeView:
        cordoned = n.initial_unschedulable == "true" if n.state in S.IN_PROGRESS else n.unschedulable
        return replace(n, state=S.DONE, needs_upgrade=False, unschedulable=cordoned, pdb_demand=())

    views = {n.name: (finished(n) if n.state in S.IN_PROGRESS - {S.FAILED} else n) for n in nodes}
    rounds: list[list[str]] = []
    while True:
        actions = next_actions(views.values(), policy, budgets)
        promoted = [a.node for a in actions if a.kind == "mark-required"]
        begun = [a.node for a in actions if a.kind == "start"]
        for name in promoted:  # marking is not starting: replay with the node at upgrade-required
            views[name] = replace(views[name], state=S.REQUIRED)
        for name in begun:
            views[name] = finished(views[name])
        if begun:
            rounds.append(begun)
        elif not promoted:
            return rounds, {a.node: a for a in actions if a.kind == "hold"}
