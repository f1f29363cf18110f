"""The controller's small parts, each alone: the alarm's decision (pure), the caches' memory of the controller's own
writes, the gate's writer deciding only from a node that shows its last write, the work queue, the board's view."""

from __future__ import annotations

import threading
from typing import Any

from gpualign.controller import alarm, gate
from gpualign.controller.board import board_view, fleet_view
from gpualign.controller.caches import WRITE_SEEN_WITHIN, Caches
from gpualign.controller.findings import Findings
from gpualign.controller.gate_writer import GateWriter
from gpualign.controller.ledger_view import LedgerView
from gpualign.controller.node_finding import NodeFinding
from gpualign.controller.reconciler import WorkQueue
from gpualign.ledger.sources import Ledger
from gpualign.model.audit import Finding, Status
from gpualign.model.facts import node_facts
from gpualign.upgrade import states as S
from tests.support import builders
from tests.support.findings import finding

TAG = "595-6.8.0-1015-aws-ubuntu22.04"


def missing(tag: str = TAG, name: str = "n1") -> Finding:
    return finding(tag, Status.MISSING, name=name, reason="no such tag")


def present(tag: str = TAG, name: str = "n1") -> Finding:
    return finding(tag, Status.PRESENT, name=name)


# -- the alarm ---------------------------------------------------------------------------------------------------------
def test_a_missing_image_is_alarmed_once_and_cleared_once():
    first = alarm.decide(missing(), {}, None, None)
    assert first is not None and (first.status, first.tag, first.sequence) == (Status.MISSING, TAG, 1)
    assert alarm.event(first, missing()).reason == alarm.EVENT_MISSING
    written = {k: v for k, v in first.annotations().items() if v is not None}
    assert alarm.decide(missing(), written, None, None) is None  # the node says it already: nothing to write
    assert alarm.decide(missing(), {}, (Status.MISSING, TAG), None) is None  # this process wrote it
    cleared = alarm.decide(present(), written, None, None)
    assert cleared is not None and cleared.status is None and cleared.sequence == 2 and cleared.was_alarmed
    assert alarm.event(cleared, present()).reason == alarm.EVENT_PRESENT


def test_a_healthy_node_costs_no_write():
    assert alarm.decide(present(), {}, None, None) is None


def test_a_write_whose_answer_was_lost_resumes_with_its_own_event_name():
    written = alarm.decide(missing(), {}, None, None)
    assert written is not None
    # the annotation landed, the answer did not: the retry writes no annotation and names the same Event
    again = alarm.decide(missing(), {k: v for k, v in written.annotations().items() if v},
                         (Status.MISSING, TAG), (Status.MISSING, TAG, written.sequence))
    assert again is not None and again.resuming and again.sequence == written.sequence


def test_a_long_node_name_still_makes_a_valid_event_name():
    name = alarm.event_name("n" * 250, 7)
    assert len(name) <= 253 and name.endswith(".gpualign-7")
    assert alarm.event_name("gpu-a1", 3) == "gpu-a1.gpualign-3"


# -- the caches and the gate's writer --------------------------------------------------------------------------------
def node(name: str, rv: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    return builders.node(name, kernel="6.8.0-1015-aws", annotations=annotations or {}, resource_version=rv,
                         **(labels or {}))


class RecordingKube:
    """Answers a node PATCH as the API server would (the merged node, a new resourceVersion) and records it. Another
    writer's write lands just before each patch (the resourceVersion steps by two)."""

    def __init__(self, current: dict) -> None:
        self.current, self.patches, self.events = current, [], []

    def patch(self, path: str, body: dict) -> dict:
        self.patches.append(body)
        meta = self.current["metadata"]
        for part in ("labels", "annotations"):
            for k, v in (body["metadata"].get(part) or {}).items():
                if v is None:
                    meta[part].pop(k, None)
                else:
                    meta[part][k] = v
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 2)
        return {"metadata": {**meta, "labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])}}

    def event(self, obj: dict, reason: str, message: str, **_: Any) -> None:
        self.events.append(reason)


def writer(kube: RecordingKube, caches: Caches, tags: frozenset[str]) -> GateWriter:
    ledger = LedgerView(lambda _op: Ledger(tags, ("file",)))
    ledger.refresh(None)
    return GateWriter(kube, caches, ledger, retry=lambda _n: None)  # type: ignore[arg-type]


def test_the_gate_never_writes_twice_from_a_node_that_predates_its_write():
    """The race the coexistence test once lost: two checks of one node before its watch shows the first's write."""
    kube = RecordingKube(node("gpu-c1", "10"))
    requeued: list[str] = []
    caches = Caches(requeue=requeued.extend)
    caches.node_event("ADDED", node("gpu-c1", "10"))
    gw = writer(kube, caches, frozenset())
    stale = caches.node("gpu-c1")[0]
    assert stale is not None
    gw.apply(stale, missing(), None)
    assert len(kube.patches) == 1 and kube.events == ["DriverUpgradeGated"]
    gw.apply(stale, missing(), None)  # a second check, from the same (stale) cached node
    caches.node_event("MODIFIED", node("gpu-c1", "11", {S.STATE_LABEL: "upgrade-required"}))  # another writer's,
    gw.apply(caches.node("gpu-c1")[0], missing(), None)  # made before ours: still without our label
    assert len(kube.patches) == 1
    requeued.clear()
    caches.node_event("MODIFIED", kube.current)  # the watch shows our write: the node is checked again
    assert requeued == ["gpu-c1"] and caches.current("gpu-c1")
    held = caches.node("gpu-c1")[0]
    assert held is not None and held.labels[S.SKIP_LABEL] == "true"
    gw.apply(held, missing(), None)
    assert len(kube.patches) == 1  # held already: nothing to write


def test_a_write_the_watch_showed_before_its_answer_came_is_not_awaited():
    """The watch can deliver the write's event before the writer reads the answer; and a write that changed nothing
    has the version the watch showed already. Neither may hold the gate's decisions back."""
    caches = Caches(requeue=lambda _n: None)
    caches.node_event("ADDED", node("gpu-c1", "10"))
    caches.node_event("MODIFIED", node("gpu-c1", "12", {S.SKIP_LABEL: "true"}))  # our write, shown first
    caches.node_event("MODIFIED", node("gpu-c1", "13", {S.SKIP_LABEL: "true"}))  # and another writer's after it
    caches.wrote(node("gpu-c1", "12", {S.SKIP_LABEL: "true"}))  # then its answer
    assert caches.current("gpu-c1")
    caches.wrote(node("gpu-c1", "13", {S.SKIP_LABEL: "true"}))  # a write that changed nothing
    assert caches.current("gpu-c1")
    caches.wrote(node("gpu-c1", "14"))  # a write not shown yet: awaited
    assert not caches.current("gpu-c1")


def test_the_gate_releases_once_the_image_is_in_the_ledger():
    kube = RecordingKube(node("gpu-c1", "20", {S.SKIP_LABEL: "true"}, {gate.GATED: "target image x missing"}))
    caches = Caches(requeue=lambda _n: None)
    caches.node_event("ADDED", kube.current)
    gw = writer(kube, caches, frozenset({TAG}))
    facts = caches.node("gpu-c1")[0]
    assert facts is not None
    gw.apply(facts, present(), None)
    gw.apply(facts, present(), None)
    assert len(kube.patches) == 1 and kube.events == ["DriverUpgradeReleased"]
    assert S.SKIP_LABEL not in kube.current["metadata"]["labels"]


def test_an_unseen_write_is_trusted_again_after_a_while_and_a_list_is_the_present():
    now = [100.0]
    caches = Caches(requeue=lambda _n: None, clock=lambda: now[0])
    caches.wrote(node("gpu-a", "5"))
    assert not caches.current("gpu-a")
    now[0] += WRITE_SEEN_WITHIN
    assert caches.current("gpu-a")
    caches.wrote(node("gpu-a", "6"))
    caches.sync_nodes([node("gpu-a", "9")])
    assert caches.current("gpu-a")
    caches.wrote(node("gpu-a", "10"))
    assert caches.unseen_too_long() == []
    now[0] += WRITE_SEEN_WITHIN  # never shown (an event lost): checked again by the refresher, and trusted
    assert caches.unseen_too_long() == ["gpu-a"] and caches.current("gpu-a")


def test_a_gone_node_is_checked_again_so_that_it_is_forgotten():
    requeued: list[str] = []
    caches = Caches(requeue=requeued.extend)
    caches.sync_nodes([node("gpu-a", "1"), node("gpu-b", "1")])
    requeued.clear()
    caches.sync_nodes([node("gpu-a", "2")])
    assert sorted(requeued) == ["gpu-a", "gpu-b"] and caches.node("gpu-b") == (None, None)
    requeued.clear()
    caches.node_event("DELETED", node("gpu-a", "3"))
    assert requeued == ["gpu-a"] and caches.names() == []


# -- the findings and the work queue ----------------------------------------------------------------------------------
def test_listeners_hear_when_a_node_begins_and_stops_waiting():
    heard: list[tuple[str, str | None, str | None]] = []
    findings = Findings(on_missing=[lambda n, old, new: heard.append((n, old, new))])
    findings.record("gpu-a", NodeFinding.of(missing()))
    findings.record("gpu-a", NodeFinding.of(missing()))  # no change: no word
    findings.record("gpu-a", NodeFinding.of(present()))
    findings.record("gpu-b", NodeFinding.of(missing("other")))
    findings.forget("gpu-b")
    assert heard == [("gpu-a", None, TAG), ("gpu-a", TAG, None), ("gpu-b", None, "other"), ("gpu-b", "other", None)]


def test_a_node_asked_for_many_times_is_queued_once():
    work = WorkQueue()
    work.put(["a", "b", "a", "a"])
    assert [work.get(0.01), work.get(0.01), work.get(0.01)] == ["a", "b", None]
    work.put_one("a")  # asked for again once taken (its check may have read it before the change)
    assert work.get(0.01) == "a"


def test_workers_share_the_queue_without_losing_a_node():
    work = WorkQueue()
    names = [f"n{i}" for i in range(500)]
    got: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        while (name := work.get(0.05)) is not None:
            with lock:
                got.append(name)

    threads = [threading.Thread(target=take) for _ in range(4)]
    work.put(names)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(names)


# -- the board ---------------------------------------------------------------------------------------------------------
def test_the_board_names_stuck_gated_and_missing_nodes():
    facts = {n["metadata"]["name"]: node_facts(n) for n in (
        node("gpu-a", "1", {S.STATE_LABEL: "wait-for-jobs-required"}, {S.BLOCKER: "PDB train refuses"}),
        node("gpu-b", "1", {S.SKIP_LABEL: "true"}, {gate.GATED: "target image x missing"}),
        node("gpu-c", "1"))}
    findings = [NodeFinding.of(present(name="gpu-a")), NodeFinding.of(missing(name="gpu-b")),
                NodeFinding.of(present(name="gpu-c"), pod_state="ImagePullBackOff")]
    counts = fleet_view(findings, facts, leader=True)
    assert counts["missing"] == {TAG: ["gpu-b"]} and counts["gated"] == {"gpu-b": "target image x missing"}
    assert counts["stuck"] == ["gpu-a", "gpu-c"] and counts["upgrade_counts"] == {"wait-for-jobs-required": 1,
                                                                                    "none": 2}
    board = board_view(findings, facts, leader=False, updated="now", ledger_sources=("file",), cluster="https://k")
    assert [n["name"] for n in board["nodes"]] == ["gpu-a", "gpu-b", "gpu-c"] and board["leader"] == 0
    assert [n["stuck"] for n in board["nodes"]] == [True, False, True]
    assert board["nodes"][1]["gated"] == "target image x missing"


def test_a_node_with_no_gpu_label_that_runs_a_driver_pod_is_a_gpu_node_while_it_runs_one():
    """The operator's DRA mode labels no node nvidia.com/gpu.present: the controller watches every node and counts
    one running a driver pod, as check, status and why do."""
    from gpualign.controller.caches import Caches

    requeued: list[str] = []
    caches = Caches(requeue=lambda names: requeued.extend(names))
    caches.sync_nodes([builders.node("gpu-1"), builders.node("dra-1", base=False, **{
        "feature.node.kubernetes.io/kernel-version.full": "6.1.0-57-amd64"}), builders.node("cpu-1", base=False)])
    assert caches.names() == ["gpu-1"] and caches.node("dra-1") == (None, None)
    pod = {"metadata": {"name": "nvidia-driver-x", "namespace": "gpu-operator"}, "spec": {"nodeName": "dra-1",
           "containers": [{"image": "r/driver:535-6.1.0-57-amd64-debian12"}]}, "status": {"phase": "Pending"}}
    caches.pod_event("ADDED", pod)
    facts, driver = caches.node("dra-1")
    assert facts is not None and facts.gpu and driver is not None and "dra-1" in requeued
    assert sorted(caches.names()) == ["dra-1", "gpu-1"] and "cpu-1" not in caches.names()
    caches.pod_event("DELETED", pod)
    assert caches.node("dra-1") == (None, None) and caches.names() == ["gpu-1"]
