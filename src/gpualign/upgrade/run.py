"""The walk: ensure the target images in the pools' DaemonSets, then reconcile passes until nothing can move."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpualign.base.errors import ApiError, Unreachable
from gpualign.kube.client import Kube
from gpualign.ledger.sources import Ledger
from gpualign.model.image_ref import repository_of
from gpualign.model.tags import Rules
from gpualign.upgrade import snapshot as snap_mod
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import BlockKind
from gpualign.upgrade.executor import Executor
from gpualign.upgrade.planner import Action
from gpualign.upgrade.snapshot import NodeState, Snapshot, image_tag
from gpualign.upgrade.upgrade_policy import PDB_AWARE, UpgradePolicy
from gpualign.upgrade.waker import Waker

SETTLE = 10.0  # seconds a walk left with only PDB holds waits for the budgets to settle before it ends
PASS_INTERVAL = 1.0  # the longest wait between passes; a watched change or a node that moved ends it sooner
OUTAGE_TOLERANCE = 180.0  # seconds of API-server outage a walk rides out before giving up


@dataclass
class Outcome:
    states: dict[str, str]
    reasons: dict[str, str]  # node -> why it is not done, in words
    passes: int
    seconds: float
    holds: dict[str, Action] = field(default_factory=dict)  # node -> the planner's hold, where one held it

    @property
    def ok(self) -> bool:
        return all(s == S.DONE for s in self.states.values())

    @property
    def pdb_held(self) -> dict[str, Action]:
        """Nodes left uncordoned at upgrade-required because a PDB could not let their evictions go."""
        return {n: a for n, a in self.holds.items() if a.hold is BlockKind.PDB}


def ensure_images(kube: Kube, snap: Snapshot, report: Callable[[str, str], None]) -> bool:
    """--to-branch: point each pool's DaemonSet at the target tag, but only where the ledger has that image, and
    only once the walk has admitted (cordoned) a node of the pool. Returns whether a DaemonSet was repointed.

    The DaemonSets are OnDelete, so nothing restarts here: nodes move one by one when their walk reaches
    pod-restart-required, several passes after their cordon. A pool whose every node is held (a PDB that allows no
    eviction) keeps its old template: a driver pod restarted by anything else (a reboot, someone's eviction) comes
    back on the driver it had, never on the new one under running GPU work.
    """
    repointed = False
    members: dict[int, list[NodeState]] = {}  # every pass reads this: the nodes grouped by pool once
    for s in snap.nodes.values():
        if s.pool is not None:
            members.setdefault(id(s.pool), []).append(s)
    for pool in snap.pools:
        nodes = members.get(id(pool), [])
        targets = {s.target_tag for s in nodes if s.target_tag}
        ready = any(s.view.image_present for s in nodes)
        admitted = [s for s in nodes if s.view.state in S.IN_PROGRESS - {S.FAILED}]
        if len(targets) != 1 or not ready or not admitted:
            continue
        tag = targets.pop()
        if pool.tag == tag:
            continue
        repo = repository_of(pool.image)
        template = pool.obj["spec"]["template"]["spec"]
        containers = [{"name": c["name"], "image": f"{repo}:{tag}"} for c in template["containers"][:1]]
        kube.patch(f"/apis/apps/v1/namespaces/{pool.namespace}/daemonsets/{pool.name}",
                   {"spec": {"template": {"spec": {"containers": containers}}}}, kind="strategic")
        report(pool.name, f"DaemonSet image {image_tag(pool.image)} → {tag} (OnDelete: no pod restarts yet; "
                          f"{admitted[0].name} is the first node of it the walk admitted)")
        repointed = True
    return repointed


def walk(kube: Kube, selector: str | None, policy: UpgradePolicy, *, ledger: Ledger, rules: Rules,
         to_branch: str | None, report: Callable[[str, str], None], timeout: float = 0.0,
         on_pass: Callable[[Snapshot], None] = lambda _snap: None) -> Outcome:
    waker = Waker(kube, selector).start()
    try:
        return _walk(kube, selector, policy, ledger=ledger, rules=rules, to_branch=to_branch, report=report,
                     timeout=timeout, on_pass=on_pass, waker=waker)
    finally:
        waker.close()


def _recovering(snap: Snapshot, actions: list[Action]) -> bool:
    """A node held before cordon by a PDB whose budget grows back by itself: it allows fewer disruptions than it
    would with every pod healthy (an eviction still counted in its status, a replacement not Ready yet), and can
    allow one at all."""
    budgets = snap.budgets or {}
    for a in actions:
        if a.kind != "hold" or a.hold is not BlockKind.PDB or a.node not in snap.nodes:
            continue
        for pdb, _ in snap.nodes[a.node].view.pdb_demand:
            b = budgets.get(pdb)
            if b is not None and not b.never_allows and b.desired is not None and b.expected is not None \
                    and b.allowed < b.expected - b.desired:
                return True
    return False


def _ride_out(err: Unreachable | ApiError, outage_since: float | None, report: Callable[[str, str], None]) -> float:
    """One unreachable moment of an outage: re-raised once it has lasted OUTAGE_TOLERANCE, else reported and waited
    on. Returns when the outage began."""
    began = outage_since or time.monotonic()
    if time.monotonic() - began > OUTAGE_TOLERANCE:
        raise err
    report("api-server", f"unreachable, retrying: {err.message}")
    time.sleep(2.0)
    return began


def _walk(kube: Kube, selector: str | None, policy: UpgradePolicy, *, ledger: Ledger, rules: Rules,
          to_branch: str | None, report: Callable[[str, str], None], timeout: float,
          on_pass: Callable[[Snapshot], None], waker: Waker) -> Outcome:
    started = time.monotonic()
    executor = Executor(kube, policy, report)
    passes = 0
    outage_since: float | None = None
    recovering_since: float | None = None
    settling_since: float | None = None
    budgets = policy.admission == PDB_AWARE
    while True:
        try:
            snap = snap_mod.take(kube, selector, ledger=ledger, rules=rules, to_branch=to_branch, budgets=budgets)
            if to_branch and ensure_images(kube, snap, report):
                snap = snap_mod.take(kube, selector, ledger=ledger, rules=rules, to_branch=to_branch,
                                     budgets=budgets)
            before = executor.transitions
            actions = executor.run_pass(snap)
        except (Unreachable, ApiError) as err:
            if not err.retryable:  # a 404 or a 422 stays what it is: running the pass again will not change it
                raise
            # Every step is idempotent and the state is in the cluster: wait for the API server and go on.
            outage_since = _ride_out(err, outage_since, report)
            continue
        on_pass(snap)
        waker.follow({n: s.view.state or "" for n, s in snap.nodes.items() if s.view.state in S.IN_PROGRESS})
        if outage_since is not None:
            report("api-server", f"reachable again after {time.monotonic() - outage_since:.0f}s")
            outage_since = None
        passes += 1
        moving = [a for a in actions if a.kind != "hold"]
        if moving or executor.transitions != before:
            settling_since = None
        active = [n for n in snap.nodes.values() if n.view.state in S.IN_PROGRESS - {S.FAILED}]
        # Only PDB holds left: with --timeout, wait for the budgets to grow back (a human relaxing a PDB, a
        # replacement pod turning healthy); without, end now and name what blocks, unless a budget is already on
        # its way back by itself (fewer pods healthy than the PDB expects: a replacement not Ready yet), which is
        # waited for up to the pod-deletion timeout.
        held = any(a.kind == "hold" and a.hold is BlockKind.PDB for a in actions)
        recovering = held and _recovering(snap, actions)
        recovering_since = (recovering_since or time.monotonic()) if recovering else None
        pdb_wait = (bool(timeout) and held) or (
            recovering_since is not None
            and time.monotonic() - recovering_since < policy.pod_deletion.timeout_seconds)
        if not moving and not active and executor.transitions == before and not pdb_wait:
            # PDB holds only: a budget read a moment after an eviction can look settled when it is not (a pod
            # gone, its replacement not created yet: the disruption controller then expects one pod fewer), so
            # the walk ends only once that state has held for SETTLE seconds.
            settling_since = settling_since or time.monotonic()
            if held and time.monotonic() - settling_since < SETTLE:
                waker.wait(PASS_INTERVAL)
                continue
            try:
                final = snap_mod.take(kube, selector, ledger=ledger, rules=rules, to_branch=to_branch)
            except (Unreachable, ApiError) as err:  # the closing read, too, rides out an outage: the next pass
                if not err.retryable:  # reads again
                    raise
                outage_since = _ride_out(err, outage_since, report)
                continue
            holds = {a.node: a for a in actions if a.kind == "hold"}
            reasons = {node: a.reason for node, a in holds.items()}
            for name, ns in final.nodes.items():
                if ns.view.state == S.FAILED:
                    reasons[name] = ns.annotations.get(S.BLOCKER, "upgrade-failed")
            return Outcome({n: s.view.state for n, s in final.nodes.items()}, reasons, passes,
                           time.monotonic() - started, holds)
        if timeout and time.monotonic() - started > timeout:
            return Outcome({n: s.view.state for n, s in snap.nodes.items()},
                           {n: f"--timeout {timeout:.0f}s reached in {s.view.state}" for n, s in snap.nodes.items()
                            if s.view.state != S.DONE}, passes, time.monotonic() - started)
        if executor.transitions == before:
            waker.wait(PASS_INTERVAL)  # nothing moved: until the cluster changes; after a move, read again at once
