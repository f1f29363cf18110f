"""The reconciler: a queue of nodes to re-check and the workers that check them. One check audits the node against
the ledger (its current kernel, then its next), records the finding, and, when this replica leads, publishes the
alarm and applies the gate. Several workers run checks; one node is never checked by two at once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpualign.base import labels as L
from gpualign.controller.caches import Caches
from gpualign.controller.findings import Findings
from gpualign.controller.gate_writer import GateWriter
from gpualign.controller.ledger_view import LedgerView
from gpualign.controller.node_finding import NodeFinding
from gpualign.controller.reactions import Checked, Reaction
from gpualign.kube.client import Kube
from gpualign.kube.inventory import read_operator_config
from gpualign.model.audit import AuditInput, DriverPod, Status, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.expect import from_operator
from gpualign.model.facts import NodeFacts, node_facts
from gpualign.model.operator_config import OperatorConfig, daemonset_image
from gpualign.model.tags import Rules, parse_os
from gpualign.upgrade import states as S

log = logging.getLogger("gpualign.controller")


class WorkQueue:
    """Nodes to re-check, each in the queue at most once however often it is asked for (a node asked for while it is
    being checked is queued again: the check may have read it before the change)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.queued: set[str] = set()
        self.lock = threading.Lock()

    def put(self, names: Iterable[str]) -> None:
        for name in names:
            self.put_one(name)

    def put_one(self, name: str) -> None:
        with self.lock:
            if name in self.queued:
                return
            self.queued.add(name)
        self.queue.put(name)

    def get(self, timeout: float) -> str | None:
        try:
            name = self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
        with self.lock:
            self.queued.discard(name)
        return name


@dataclass
class Reconciler:
    kube: Kube
    rules: Rules
    branches: BranchPolicy
    repository: str
    work: WorkQueue
    caches: Caches
    findings: Findings
    ledger: LedgerView
    gate: GateWriter  # the gate's writer: its admission and its overdue holds are the controller's loops' too
    reactions: list[Reaction] = field(default_factory=list)  # what is done about a node once checked, in order
    operator: OperatorConfig | None = None  # the GPU Operator's driver configuration, when the cluster has one
    follow_operator: bool = False  # expectations from the operator's objects (no branch/repository flags given)
    gating: bool = False  # --gate-operator-upgrades, with an operator to gate
    is_leader: Callable[[], bool] = lambda: True
    on_checked: Callable[[float], None] = lambda _s: None
    on_ledger_changed: list[Callable[[], None]] = field(default_factory=list)  # e.g. the archive's pools re-judged
    updated: str = ""
    node_locks: dict[str, threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def recheck_all(self) -> None:
        self.work.put(self.caches.names())

    def forget(self, name: str) -> None:
        """A GPU node is gone: nothing of it is kept (its metrics are removed through the findings' listeners)."""
        self.findings.forget(name)
        for reaction in self.reactions:
            reaction.forget(name)
        with self.lock:
            self.node_locks.pop(name, None)

    # -- the ledger and the operator's objects ----------------------------------------------------------------------
    def refresh_ledger(self, operator: OperatorConfig | None = None) -> bool:
        """Read the ledger again (for `operator`, the operator's objects as they are about to be used; default:
        the current ones); re-check every node on a change."""
        changed = self.ledger.refresh(operator or self.operator)
        if changed:
            self.recheck_all()
            for hook in self.on_ledger_changed:
                hook()
        return changed

    def refresh_operator(self) -> bool:
        """Re-read the operator's ClusterPolicy/NVIDIADrivers (when it runs here); re-check all on a change."""
        if self.operator is None:
            return False

        config, notes = read_operator_config(self.kube, tuple(self.caches.node_list()))
        for note in notes:
            log.warning("%s", note)
        if config is None or config == self.operator:
            return False
        if _repositories(config) != _repositories(self.operator):
            # A repository named for the first time is read before any node is checked against it: until then
            # its images would all look missing (a false alarm, and a false gate hold).
            self.refresh_ledger(config)
        self.operator = config
        self.recheck_all()
        return True

    def in_ledger(self, image: str) -> bool:
        """After a build Job says it pushed: the ledger read anew (its nodes re-checked when it changed)."""
        self.refresh_ledger()
        return self.ledger.has(image)

    # -- the check --------------------------------------------------------------------------------------------------
    def worker(self, stop: threading.Event) -> None:
        while not stop.is_set():
            name = self.work.get(timeout=0.5)
            if name is None:
                continue
            try:
                self.check(name)
            except Exception:  # noqa: BLE001 - one bad node must not stop the loop
                log.exception("checking node %s", name)

    def check(self, name: str) -> None:
        """Re-check one node. Several workers run checks; one node is never checked by two at once."""
        with self.lock:
            node_lock = self.node_locks.setdefault(name, threading.Lock())
        with node_lock:
            self._check(name)

    def _check(self, name: str) -> None:
        started = time.perf_counter()
        facts, pod = self.caches.node(name)
        if facts is None:  # gone, or no longer a GPU node
            self.forget(name)
            return
        branches, expect = self._expectations(facts, pod)
        operator = self.operator
        planned = None
        if operator is not None:
            found = daemonset_image(facts.labels, self.caches.pool_list())
            planned = {name: found} if found else {}
        finding = self._finding(facts, pod, branches, planned, expect)
        self.findings.record(name, finding)
        self._look_ahead(facts, branches, expect)
        checked = Checked(facts, finding, planned.get(name) if planned else None)
        leader = self.is_leader()
        for reaction in self.reactions:
            if leader or not reaction.leader_only:
                reaction.react(checked)
        self.on_checked(time.perf_counter() - started)
        self.updated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    def _finding(self, facts: NodeFacts, pod: DriverPod | None, branches: BranchPolicy,
                 planned: dict[str, tuple[str, str]] | None, expect: Any) -> NodeFinding:
        def judged(wrong: dict[str, str] | None = None) -> Any:
            return audit(AuditInput([facts], self.ledger.ledger, self.rules, branches, repository=self.repository,
                                    pods={facts.name: pod} if pod else {}, planned=planned, expect=expect,
                                    wrong=wrong))

        first = judged().findings[0]
        if first.status == Status.PRESENT and first.image and \
                (why := self.ledger.wrong(first.image, facts.arch, first.module_type)):
            first = judged({first.image: why}).findings[0]
        return NodeFinding.of(first, upgrade_state=facts.labels.get(S.STATE_LABEL),
                              pod_state=pod.state if pod else None)

    def _expectations(self, facts: NodeFacts, pod: DriverPod | None) -> tuple[BranchPolicy, Any]:
        """The branches and the operator's expectation a node is judged by."""
        branches = self.branches
        if not branches.branch_for(facts.labels) and pod is None:
            hint = self.caches.pool_branch(facts)
            if hint:
                branches = BranchPolicy(default=hint)
        operator = self.operator
        return branches, from_operator(operator) if operator is not None and self.follow_operator else None

    def future(self, facts: NodeFacts, kernel_label: str) -> NodeFinding:
        """The finding of `facts`' node as it would be on another kernel (the one Debian's archive installs next on
        its pool), judged as its current one is."""
        branches, expect = self._expectations(facts, self.caches.node(facts.name)[1])
        return self._judged_as(facts.name, {**facts.labels, L.KERNEL: kernel_label},
                               self._ahead_branches(facts, branches), expect)

    def _ahead_branches(self, facts: NodeFacts, branches: BranchPolicy) -> BranchPolicy:
        """The branches a node's next kernel or OS is judged by. Judged without a driver pod, the branch must be
        named: the node's own (a policy or flag), else the one its driver DaemonSet deploys now, else its pod's."""
        if branches.branch_for(facts.labels):
            return branches
        pod = self.caches.node(facts.name)[1]
        pod_branch = pod.tag.split("-", 1)[0] if pod is not None and pod.tag else None
        hint = self.caches.pool_branch(facts) or (pod_branch if pod_branch and pod_branch.isdigit() else None)
        return BranchPolicy(default=hint) if hint else branches

    def _judged_as(self, name: str, labels: dict[str, str], branches: BranchPolicy, expect: Any) -> NodeFinding:
        """The finding of a node with these labels (its kernel or OS changed), without its driver pod."""
        future = node_facts({"metadata": {"name": name, "labels": labels}})

        def judged(wrong: dict[str, str] | None = None) -> Any:
            return audit(AuditInput([future], self.ledger.ledger, self.rules, branches, repository=self.repository,
                                    expect=expect, wrong=wrong))

        first = judged().findings[0]
        # a present image is judged by its own labels, as the node's current one is (one answer with plan)
        if first.status == Status.PRESENT and first.image and \
                (why := self.ledger.wrong(first.image, future.arch, first.module_type)):
            first = judged({first.image: why}).findings[0]
        return NodeFinding.of(first)

    def _look_ahead(self, facts: NodeFacts, branches: BranchPolicy, expect: Any) -> None:
        """The image of the node's next kernel (gpualign.io/kernel.next) and OS (gpualign.io/os.next), judged as its
        current one is: the same expectation with only those changed, so it can be made before the node reboots
        into them."""
        labels = dict(facts.labels)
        kernel_next = labels.get(L.KERNEL_NEXT)
        if kernel_next:
            labels[L.KERNEL] = kernel_next
        os_next = parse_os(labels.get(L.OS_NEXT))
        if os_next is not None:
            labels[L.OS_ID], labels[L.OS_VERSION] = os_next
        finding = None
        if labels.get(L.KERNEL) != facts.labels.get(L.KERNEL) or (os_next is not None and
                                                                   os_next != (facts.os_id, facts.os_version)):
            finding = self._judged_as(facts.name, labels, self._ahead_branches(facts, branches), expect)
            if os_next is not None:
                finding = dataclasses.replace(finding, os_next="-".join(os_next))
        self.findings.record_ahead(facts.name, finding)


def _repositories(config: OperatorConfig | None) -> frozenset[str]:
    return frozenset(s.repository for s in (config.sources if config else ()) if s.repository and not s.problem)
