"""One cluster as the controller sees it (ClusterState), and its core loop: a cache of GPU nodes and driver pods fed
by watches, a queue of nodes to re-check, and the alarm: an Event, a node annotation and a metric while a node
needs an image the ledger lacks.

The node annotation is also the alarm's memory: an Event is posted only when a node's status turns to missing for
a tag, so a restarted (or newly elected) controller neither loses nor repeats one.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpualign.base import labels as L
from gpualign.base.errors import GpualignError
from gpualign.controller import gate
from gpualign.controller.gate_release import release_node
from gpualign.kube.client import Kube
from gpualign.ledger.sources import Ledger, RepoLedgers
from gpualign.model.audit import AuditInput, DriverPod, Status, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.expect import from_operator
from gpualign.model.facts import NodeFacts, node_facts
from gpualign.model.operator_config import OperatorConfig, daemonset_image
from gpualign.model.tags import Rules, parse_os
from gpualign.upgrade import states as S
from gpualign.upgrade.clock import since

log = logging.getLogger("gpualign.controller")
JSON = dict[str, Any]

IMAGE_ANNOTATION = "gpualign.io/driver-image"
STATUS_ANNOTATION = "gpualign.io/driver-image-status"
# How many alarm transitions (alarmed, cleared) were written on the node: it names each transition's Event, so a
# retried Event (after an answer lost to a reset) is the same object and is refused as a duplicate, never posted twice.
SEQUENCE_ANNOTATION = "gpualign.io/driver-image-transitions"
EVENT_MISSING = "DriverImageMissing"
EVENT_PRESENT = "DriverImageAvailable"
EVENT_MISMATCH = "DriverImageMismatch"  # the GPU Operator deploys an image built for another OS or kernel
EVENT_WRONG = "DriverImageWrong"  # in the ledger under the tag, but its labels name another kernel or branch
ALARMS = (Status.MISSING, Status.OPERATOR_MISMATCH, Status.WRONG_IMAGE)
EVENT_GATED = "DriverUpgradeGated"
EVENT_UNGATED = "DriverUpgradeReleased"
EVENT_HELD_LONG = "DriverUpgradeGatedLong"
WATCHED_LABELS = (L.KERNEL, L.KERNEL_NEXT, L.OS_NEXT, L.OS_ID, L.OS_VERSION, L.GPU_PRESENT, L.DEPLOY_DRIVER,
                  L.DRIVER_CURRENT_FULL,
                  *L.DRIVER_CURRENT.values(), *L.DRIVER_LEGACY.values(), S.STATE_LABEL, S.SKIP_LABEL)


@dataclass
class ClusterState:
    kube: Kube
    rules: Rules
    policy: BranchPolicy
    repository: str
    load_ledger: Callable[[OperatorConfig | None], Ledger | RepoLedgers]  # as the operator's objects name it
    operator: OperatorConfig | None = None  # the GPU Operator's driver configuration, when the cluster has one
    follow_operator: bool = False  # expectations from the operator's objects (no branch/repository flags given)
    gate: bool = False  # --gate-operator-upgrades: hold the operator's walk off nodes whose target image is missing
    gate_warn_after: float = 86400.0  # a hold older than this raises a warning Event (once per hold) and shows
    is_leader: Callable[[], bool] = lambda: True
    on_checked: Callable[[float], None] = lambda _s: None
    on_missing: Callable[[str, str | None, str | None], None] = lambda _n, _old, _new: None
    # (node, tag missing for its next kernel before, now): build ahead (gpualign.io/kernel.next)
    on_ahead_missing: Callable[[str, str | None, str | None], None] = lambda _n, _old, _new: None
    # image -> why it is present but wrong (its labels), or None; asked once per image per ledger read
    # (image, the node's CPU architecture, kernelModuleType) -> why it is present but wrong for such a node (its
    # labels, its platforms, the flavour of its modules)
    judge_image: Callable[[str, str, str | None], str | None] = lambda _i, _a, _m: None
    judged: dict[tuple[str, str, str | None], str | None] = field(default_factory=dict)
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    pods: dict[str, DriverPod] = field(default_factory=dict)
    findings: dict[str, JSON] = field(default_factory=dict)
    ahead: dict[str, JSON] = field(default_factory=dict)  # node -> the finding for its next kernel (kernel.next)
    ledger: Ledger | RepoLedgers = field(default_factory=lambda: Ledger(frozenset(), ()))
    queue: queue.Queue[str] = field(default_factory=queue.Queue)
    lock: threading.Lock = field(default_factory=threading.Lock)
    events_posted: int = 0
    updated: str = ""
    published: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    # node -> the transition written (status, tag, sequence) whose Event is not confirmed yet (a write failed)
    unconfirmed: dict[str, tuple[str | None, str | None, int]] = field(default_factory=dict)
    node_locks: dict[str, threading.Lock] = field(default_factory=dict)
    pools: dict[str, JSON] = field(default_factory=dict)  # driver DaemonSets by namespace/name

    # -- cache updates from the watches -------------------------------------------------------------------------
    def sync_nodes(self, items: list[JSON]) -> None:
        fresh = {f.name: f for f in map(node_facts, items) if f.gpu}
        with self.lock:
            gone = set(self.nodes) - set(fresh)
            self.nodes = fresh
            for name in gone:
                self._forget(name)
        for name in fresh:
            self.queue.put(name)

    def node_event(self, kind: str, obj: JSON) -> None:
        facts = node_facts(obj)
        with self.lock:
            old = self.nodes.get(facts.name)
            if kind == "DELETED" or not facts.gpu:
                self.nodes.pop(facts.name, None)
                self._forget(facts.name)
                return
            self.nodes[facts.name] = facts
        relevant = old is None or any(old.labels.get(k) != facts.labels.get(k) for k in WATCHED_LABELS)
        if relevant:
            self.queue.put(facts.name)

    def sync_pods(self, items: list[JSON]) -> None:
        with self.lock:
            self.pods = {}
            for pod in items:
                node = (pod.get("spec") or {}).get("nodeName")
                if node and not pod["metadata"].get("deletionTimestamp"):
                    self.pods[node] = DriverPod.from_pod(pod)
        for name in list(self.nodes):
            self.queue.put(name)

    def pod_event(self, kind: str, pod: JSON) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        with self.lock:
            current = self.pods.get(node)
            name = f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                if current and current.name == name:
                    self.pods.pop(node, None)
            else:
                self.pods[node] = DriverPod.from_pod(pod)
        self.queue.put(node)

    def sync_pools(self, items: list[JSON]) -> None:
        with self.lock:
            self.pools = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in items}
        for name in list(self.nodes):
            self.queue.put(name)

    def pool_event(self, kind: str, ds: JSON) -> None:
        key = f"{ds['metadata']['namespace']}/{ds['metadata']['name']}"
        with self.lock:
            old = self.pools.pop(key, None) if kind == "DELETED" else self.pools.get(key)
            if kind != "DELETED":
                self.pools[key] = ds
        def template(d: JSON | None) -> Any:
            return ((d or {}).get("spec") or {}).get("template")

        if kind == "DELETED" or template(old) != template(ds):  # status-only updates change nothing here
            for name in list(self.nodes):
                self.queue.put(name)

    def _pool_branch(self, facts: NodeFacts) -> str | None:
        """The branch the node's driver DaemonSet deploys: known before its pod exists (a brand-new node)."""
        with self.lock:
            pools = list(self.pools.values())
        for ds in pools:
            template = (ds.get("spec") or {}).get("template") or {}
            selector = (template.get("spec") or {}).get("nodeSelector") or {}
            if selector and all(facts.labels.get(k) == v for k, v in selector.items()):
                image = ((template.get("spec") or {}).get("containers") or [{}])[0].get("image", "")
                tag = image.rsplit("/", 1)[-1].partition(":")[2]
                head = tag.split("-", 1)[0].split(".")[0]
                return head if head.isdigit() else None
        return None

    def _forget(self, name: str) -> None:
        self.published.pop(name, None)
        self.unconfirmed.pop(name, None)
        self.node_locks.pop(name, None)
        old = self.findings.pop(name, None)
        if old and old["status"] == Status.MISSING:
            self.on_missing(name, old["tag"], None)
        old = self.ahead.pop(name, None)
        if old and old["status"] == Status.MISSING:
            self.on_ahead_missing(name, old["tag"], None)

    # -- the ledger ---------------------------------------------------------------------------------------------
    def refresh_ledger(self, operator: OperatorConfig | None = None) -> bool:
        """Read the ledger again (for `operator`, the operator's objects as they are about to be used; default:
        the current ones); re-check every node on a change."""
        ledger = self.load_ledger(operator or self.operator)
        changed = ledger.fingerprint != self.ledger.fingerprint or ledger.sources != self.ledger.sources
        with self.lock:
            self.ledger = ledger
            # a tag may have been pushed again (repaired, or broken) under the same name: judge every image anew
            was_wrong = any(self.judged.values())
            self.judged = {}
        if was_wrong:
            changed = True
        if changed:
            for name in list(self.nodes):
                self.queue.put(name)
        return changed

    def refresh_operator(self) -> bool:
        """Re-read the operator's ClusterPolicy/NVIDIADrivers (when it runs here); re-check all on a change."""
        if self.operator is None:
            return False
        from gpualign.kube.inventory import read_operator_config

        with self.lock:
            nodes = tuple(self.nodes.values())
        config, notes = read_operator_config(self.kube, nodes)
        for note in notes:
            log.warning("%s", note)
        if config is None or config == self.operator:
            return False
        if _repositories(config) != _repositories(self.operator):
            # A repository named for the first time is read before any node is checked against it: until then
            # its images would all look missing (a false alarm, and a false gate hold).
            self.refresh_ledger(config)
        self.operator = config
        for name in list(self.nodes):
            self.queue.put(name)
        return True

    # -- the check ----------------------------------------------------------------------------------------------
    def check(self, name: str) -> None:
        """Re-check one node. Several workers run checks; one node is never checked by two at once."""
        with self.lock:
            node_lock = self.node_locks.setdefault(name, threading.Lock())
        with node_lock:
            self._check(name)

    def _check(self, name: str) -> None:
        started = time.perf_counter()
        with self.lock:
            facts = self.nodes.get(name)
            pod = self.pods.get(name)
        if facts is None:
            return
        policy = self.policy
        if not policy.branch_for(facts.labels) and pod is None:
            hint = self._pool_branch(facts)
            if hint:
                policy = BranchPolicy(default=hint)
        operator = self.operator
        planned = None
        if operator is not None:
            with self.lock:
                pools = list(self.pools.values())
            found = daemonset_image(facts.labels, pools)
            planned = {name: found} if found else {}
        expect = from_operator(operator) if operator is not None and self.follow_operator else None
        result = audit(AuditInput([facts], self.ledger, self.rules, policy, repository=self.repository,
                                  pods={name: pod} if pod else {}, planned=planned, expect=expect))
        first = result.findings[0]
        if first.status == Status.PRESENT and first.image and \
                (why := self._wrong(first.image, facts.arch, first.module_type)):
            result = audit(AuditInput([facts], self.ledger, self.rules, policy, repository=self.repository,
                                      pods={name: pod} if pod else {}, planned=planned, expect=expect,
                                      wrong={first.image: why}))
        finding = result.findings[0].as_dict()
        finding["upgrade_state"] = facts.labels.get(S.STATE_LABEL)
        finding["pod_state"] = pod.state if pod else None
        with self.lock:
            old = self.findings.get(name)
            self.findings[name] = finding
        old_missing = old["tag"] if old and old["status"] == Status.MISSING else None
        new_missing = finding["tag"] if finding["status"] == Status.MISSING else None
        if old_missing != new_missing:
            self.on_missing(name, old_missing, new_missing)
        self._look_ahead(facts, policy, expect)
        if self.is_leader():
            self._publish(facts, finding)
            if self.gate and operator is not None:
                self._gate(facts, finding, planned.get(name) if planned else None)
            elif gate.GATED in facts.annotations:
                self._ungate(facts)
        self.on_checked(time.perf_counter() - started)
        self.updated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    def _look_ahead(self, facts: NodeFacts, policy: BranchPolicy, expect: Any) -> None:
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
            future = node_facts({"metadata": {"name": facts.name, "labels": labels}})
            result = audit(AuditInput([future], self.ledger, self.rules, policy, repository=self.repository,
                                      expect=expect))
            finding = {**result.findings[0].as_dict(), "kernel": future.kernel}
            if os_next is not None:
                finding["os"] = "-".join(os_next)
        with self.lock:
            old = self.ahead.pop(facts.name, None)
            if finding is not None:
                self.ahead[facts.name] = finding
        old_missing = old["tag"] if old and old["status"] == Status.MISSING else None
        new_missing = finding["tag"] if finding and finding["status"] == Status.MISSING else None
        if old_missing != new_missing:
            self.on_ahead_missing(facts.name, old_missing, new_missing)

    def _publish(self, facts: NodeFacts, finding: JSON) -> None:
        """Annotation (the alarm's memory) and, on a transition, an Event. Only the leader writes.

        Only a missing image, or an operator deploying a mismatched one, is written down; a healthy node carries no
        annotation, so a 5,000-node fleet costs no writes at start-up. A write whose answer is lost (a reset
        connection) is retried: the annotation is idempotent, and the Event is named by the transition's sequence
        number, so the retry finds it if it was made, and makes it if it was not. Nothing is lost, nothing doubled."""
        status = finding["status"] if finding["status"] in ALARMS else None
        tag = finding["tag"] if status else None
        ann = facts.annotations
        # What this process last wrote, else what the node says (a restarted or newly elected controller).
        last = self.published.get(facts.name) or (ann.get(STATUS_ANNOTATION), ann.get(IMAGE_ANNOTATION))
        pending = self.unconfirmed.get(facts.name)
        resuming = pending is not None and pending[:2] == (status, tag) and last == (status, tag)
        if last == (status, tag) and not resuming:
            return
        try:
            if resuming:
                # The annotation landed (its answer may have been lost); its Event may not have.
                assert pending is not None
                sequence, was_alarmed = pending[2], status is None
                node_obj = self.kube.get(f"/api/v1/nodes/{facts.name}")
                if node_obj is None:
                    self.unconfirmed.pop(facts.name, None)
                    return
            else:
                was_alarmed = last[0] in ALARMS
                sequence = _sequence(ann) + 1
                self.unconfirmed[facts.name] = (status, tag, sequence)
                node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}", {"metadata": {"annotations": {
                    IMAGE_ANNOTATION: tag, STATUS_ANNOTATION: status, SEQUENCE_ANNOTATION: str(sequence)}}})
            name = _event_name(facts.name, sequence)
            if status == Status.MISSING:
                self.kube.event(node_obj, EVENT_MISSING,
                                f"driver image {finding['image']} is missing from the ledger: this node's driver "
                                f"pod cannot pull it and the node loses its GPUs ({finding['reason']})", name=name)
                self.events_posted += 1
            elif status == Status.WRONG_IMAGE:
                self.kube.event(node_obj, EVENT_WRONG, f"driver image {finding['image']} is in the ledger but "
                                f"{finding['reason']}: a driver pod that pulls it crash-loops (repair: gpualign "
                                f"ensure {finding['tag']} --replace-wrong)", name=name)
                self.events_posted += 1
            elif status == Status.OPERATOR_MISMATCH:
                self.kube.event(node_obj, EVENT_MISMATCH, f"the GPU Operator deploys {finding['operator_image']} "
                                f"here, built for another OS or kernel: {finding['reason']}", name=name)
                self.events_posted += 1
            elif was_alarmed:
                self.kube.event(node_obj, EVENT_PRESENT, f"driver image {finding['image']} is in the ledger and "
                                "is what the operator deploys", warning=False, name=name)
                self.events_posted += 1
            self.published[facts.name] = (status, tag)
            self.unconfirmed.pop(facts.name, None)
        except GpualignError as err:
            log.warning("node %s: %s", facts.name, err.message)
            self.queue.put(facts.name)  # try again: the alarm must not be lost

    def _in_ledger(self, image: str) -> bool:
        repo, _, tag = image.rpartition(":")
        return self.ledger.for_repository(repo).has(tag)

    def _wrong(self, image: str, arch: str, module_type: str | None = None) -> str | None:
        """Why a present image is wrong by its own labels (asked of the registry once per image per ledger read),
        or None. Only registry ledgers are asked: a file names tags, not images to read."""
        from gpualign.ledger.sources import is_registry

        if not any(is_registry(s) for s in self.ledger.sources) and not isinstance(self.ledger, RepoLedgers):
            return None
        with self.lock:
            key = (image, arch, module_type)
            if key in self.judged:
                return self.judged[key]
        try:
            why = self.judge_image(image, arch, module_type)
        except GpualignError as err:
            log.warning("image %s: its labels could not be read: %s", image, err.message)
            return None
        with self.lock:
            self.judged[key] = why
        if why:
            log.warning("driver image %s is present but wrong: %s", image, why)
        return why

    def _unusable(self, image: str, arch: str, module_type: str | None) -> str | None:
        """Why the operator must not walk a node to this image (missing, or present but wrong), or None."""
        if not self._in_ledger(image):
            return "missing from the ledger"
        why = self._wrong(image, arch, module_type)
        return f"present but wrong ({why})" if why else None

    def _gate(self, facts: NodeFacts, finding: JSON, planned: tuple[str, str] | None) -> None:
        """The operator's skip label on a node whose next driver image is missing: the image gpualign expects from
        the operator's objects (known the moment they change), or the one its DaemonSet names (what it will pull)."""
        targets = [i for i in (finding.get("image"), planned[1] if planned else None) if i]
        problems = [(i, why) for i in targets if (why := self._unusable(i, facts.arch, finding.get("module_type")))]
        missing = [i for i, _ in problems]
        patch = gate.decide(facts.labels, facts.annotations, image_missing=bool(missing),
                            target=missing[0] if missing else None, why=problems[0][1] if problems else "")
        if patch is None:
            if missing and facts.labels.get(S.SKIP_LABEL) == "true" and gate.GATED not in facts.annotations:
                log.info("node %s: its skip label was set by someone else; the gate leaves it", facts.name)
            elif missing and gate.GATED in facts.annotations:
                self._held_long(facts, missing[0])
            return
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}", {"metadata": patch})
            if missing:
                self.kube.event(node_obj, EVENT_GATED, f"held out of the GPU Operator's upgrade walk "
                                f"({S.SKIP_LABEL}=true): its target image {missing[0]} is {problems[0][1]}")
                log.warning("node %s gated: %s %s", facts.name, missing[0], problems[0][1])
            else:
                self.kube.event(node_obj, EVENT_UNGATED, "target driver image is in the ledger (and its labels "
                                "name this node's build): released to the GPU Operator's upgrade walk", warning=False)
                log.info("node %s released to the operator's walk", facts.name)
            self.events_posted += 1
        except GpualignError as err:
            log.warning("node %s: gate: %s", facts.name, err.message)
            self.queue.put(facts.name)

    def overdue_holds(self) -> list[str]:
        """Nodes the gate has held longer than gate_warn_after and not yet warned about (checked periodically: a
        hold changes nothing on the node, so no watch event would bring it back)."""
        with self.lock:
            facts = list(self.nodes.values())
        return [f.name for f in facts if f.annotations.get(gate.GATED) and not f.annotations.get(gate.HELD_WARNED)
                and since(f.annotations.get(gate.GATED_SINCE)) >= self.gate_warn_after]

    def _held_long(self, facts: NodeFacts, image: str) -> None:
        """A hold older than gate_warn_after: one warning Event per hold, so a forgotten hold becomes visible."""
        held = since(facts.annotations.get(gate.GATED_SINCE))
        if held < self.gate_warn_after or facts.annotations.get(gate.HELD_WARNED):
            return
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}",
                                       {"metadata": {"annotations": {gate.HELD_WARNED: "true"}}})
            self.kube.event(node_obj, EVENT_HELD_LONG, f"held out of the GPU Operator's upgrade walk for "
                            f"{held / 3600:.1f} h: its target image {image} is still missing from the ledger "
                            "(mirror or build it: gpualign ensure)")
            log.warning("node %s: gated for %.1f h, image %s still missing", facts.name, held / 3600, image)
            self.events_posted += 1
        except GpualignError as err:
            log.warning("node %s: gate warning: %s", facts.name, err.message)

    def _ungate(self, facts: NodeFacts) -> None:
        """The gate is off (no --gate-operator-upgrades, or no operator to gate): a skip label it set earlier must
        not outlive it, or the operator would never upgrade that node again."""
        try:
            if release_node(self.kube, facts.name, "the gate is off (the controller runs without "
                            "--gate-operator-upgrades)"):
                log.warning("node %s released: the gate is off, so its skip label (set by the gate) is removed",
                            facts.name)
                self.events_posted += 1
        except GpualignError as err:
            log.warning("node %s: releasing the gate's label: %s", facts.name, err.message)
            self.queue.put(facts.name)

    def worker(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                name = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.check(name)
            except Exception:  # noqa: BLE001 - one bad node must not stop the loop
                log.exception("checking node %s", name)

    # -- views --------------------------------------------------------------------------------------------------
    def view(self, leader: bool, *, with_nodes: bool = True) -> dict[str, Any]:
        """The fleet for the board (with_nodes) or for a metrics scrape (counts only, cheap at 5,000 nodes)."""
        with self.lock:
            findings = list(self.findings.values())
            facts = dict(self.nodes)
        missing: dict[str, list[str]] = {}
        wrong: dict[str, list[str]] = {}
        for f in findings:
            if f["status"] in (Status.MISSING, Status.WRONG_IMAGE) and f["tag"]:
                (missing if f["status"] == Status.MISSING else wrong).setdefault(f["tag"], []).append(f["name"])
        counts: dict[str, int] = {}
        blocked: list[tuple[str, str, float]] = []
        gated: dict[str, str] = {}
        gated_for: dict[str, float] = {}
        for name, nf in facts.items():
            state = nf.labels.get(S.STATE_LABEL) or "none"
            counts[state] = counts.get(state, 0) + 1
            reason = nf.annotations.get(S.BLOCKER)
            if reason:
                blocked.append((name, reason, since(nf.annotations.get(S.BLOCKED_SINCE))))
            if nf.labels.get(S.SKIP_LABEL) == "true" and nf.annotations.get(gate.GATED):
                gated[name] = nf.annotations[gate.GATED]
                gated_for[name] = since(nf.annotations.get(gate.GATED_SINCE))
        # stuck: the driver is not running (its pod waits in ImagePullBackOff, CrashLoopBackOff, …), or the node is
        # in the walk (cordoned) and something blocks it. A node held before cordon still serves: not stuck.
        no_driver = {f["name"]: f["pod_state"] for f in findings
                     if f["pod_state"] and f["pod_state"] not in ("Running", "Pending", "ContainerCreating")}
        stuck = sorted(set(no_driver) | {n for n, _, _ in blocked if facts.get(n) is not None
                                         and facts[n].labels.get(S.STATE_LABEL) in S.IN_PROGRESS})
        if not with_nodes:
            return {"nodes": facts, "missing": missing, "wrong": wrong, "upgrade_counts": counts,
                    "blocked": sorted(blocked),
                    "leader": 1 if leader else 0, "stuck": stuck, "gated": gated, "gated_for": gated_for}
        nodes = sorted(({"name": f["name"], "kernel": f["kernel"], "driver": f["driver"], "tag": f["tag"],
                         "status": f["status"], "pod_state": f["pod_state"], "reason": f.get("reason"),
                         "image": f.get("image"), "action": f.get("action"),
                         "gated": gated.get(f["name"]), "stuck": f["name"] in stuck,
                         "upgrade_state": facts[f["name"]].labels.get(S.STATE_LABEL) if f["name"] in facts else None}
                        for f in findings), key=lambda n: n["name"])
        return {"nodes": nodes, "missing": missing, "wrong": wrong, "upgrade_counts": counts,
                "blocked": sorted(blocked),
                "leader": 1 if leader else 0, "updated": self.updated, "ledger_sources": list(self.ledger.sources),
                "stuck": stuck, "gated": gated, "cluster": self.kube.server}


def _repositories(config: OperatorConfig | None) -> frozenset[str]:
    return frozenset(s.repository for s in (config.sources if config else ()) if s.repository and not s.problem)


def _sequence(annotations: Mapping[str, str]) -> int:
    value = annotations.get(SEQUENCE_ANNOTATION, "0")
    return int(value) if value.isdigit() else 0


def _event_name(node: str, sequence: int) -> str:
    """node.gpualign-<sequence>, shortened with a hash when the node's name is near the 253-character limit."""
    suffix = f".gpualign-{sequence}"
    if len(node) + len(suffix) <= 253:
        return node + suffix
    import hashlib

    return f"{node[:200]}.{hashlib.sha256(node.encode()).hexdigest()[:16]}{suffix}"
