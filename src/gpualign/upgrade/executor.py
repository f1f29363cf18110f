"""The executor: one reconcile pass applies the planner's actions and each state's handler, idempotently.

Every step reads fresh state and writes the node's label (and annotations) in one patch guarded by the node's
resourceVersion, so a process killed at any point resumes from the labels, and a concurrent write (409) is
retried on a fresh object in the next pass. Every pod leaves through the Eviction API, the driver pod included.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gpualign.base.errors import Conflict, GpualignError
from gpualign.base.json_types import JSON
from gpualign.kube.client import Kube
from gpualign.model.driver_config import RESTART_IN_PLACE
from gpualign.model.object_views import Pod, view
from gpualign.upgrade import device_taint, gpu_taint
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import TOLD, BlockKind
from gpualign.upgrade.clock import now_iso, since
from gpualign.upgrade.planner import Action, next_actions
from gpualign.upgrade.snapshot import NodeState, Snapshot, image_tag
from gpualign.upgrade.upgrade_policy import UpgradePolicy

VALIDATOR_SELECTOR = "app=nvidia-operator-validator"
NODE_WORKERS = 8  # nodes handled at once within a pass
# holds named on the node; other holds are only waits


@dataclass
class Executor:
    kube: Kube
    policy: UpgradePolicy
    report: Callable[[str, str], None] = lambda _node, _msg: None
    last_attempt: dict[str, float] = field(default_factory=dict)
    transitions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- writes -------------------------------------------------------------------------------------------------
    def move(self, ns: NodeState, state: str, *, annotations: dict[str, str | None] | None = None,
             unschedulable: bool | None = None, taints: list[dict[str, Any]] | None = None, why: str = "") -> None:
        """Set the state label (plus annotations / cordon / the node's taints) in one patch, guarded by
        resourceVersion."""
        meta = ns.node["metadata"]
        ann: dict[str, str | None] = {S.STATE_SINCE: now_iso()}
        ann.update(annotations or {})
        patch: JSON = {"metadata": {"resourceVersion": meta["resourceVersion"], "labels": {S.STATE_LABEL: state},
                                    "annotations": ann}}
        if unschedulable is not None or taints is not None:
            patch["spec"] = {**({"unschedulable": unschedulable} if unschedulable is not None else {}),
                             **({"taints": taints} if taints is not None else {})}
        self.kube.patch(f"/api/v1/nodes/{ns.name}", patch)
        with self._lock:
            self.transitions += 1
        old = ns.view.state or "(none)"
        self.say(ns.name, f"{old} → {state}" + (f": {why}" if why else ""))

    def say(self, node: str, message: str) -> None:
        with self._lock:  # nodes are handled on several threads; lines stay whole and in one order
            self.report(node, message)

    def annotate(self, ns: NodeState, annotations: dict[str, str | None]) -> None:
        current = ns.annotations
        if all(current.get(k) == v for k, v in annotations.items()):
            return
        self.kube.patch(f"/api/v1/nodes/{ns.name}", {"metadata": {"annotations": annotations}})

    def block(self, ns: NodeState, message: str, kind: BlockKind) -> None:
        """Name the blocker on the node (annotation, with its kind) and in an Event, once per distinct message."""
        if ns.annotations.get(S.BLOCKER) == message and ns.annotations.get(S.BLOCKER_KIND) == kind:
            return
        self.annotate(ns, {S.BLOCKER: message, S.BLOCKER_KIND: str(kind),
                           S.BLOCKED_SINCE: ns.annotations.get(S.BLOCKED_SINCE) or now_iso()})
        with contextlib.suppress(GpualignError):  # an event is a courtesy; the annotation is the record
            self.kube.event(ns.node, S.EVENT_REASON, message)
        self.say(ns.name, message if kind is BlockKind.PDB else f"blocked: {message}")

    def unblock(self) -> dict[str, str | None]:
        return {S.BLOCKER: None, S.BLOCKER_KIND: None, S.BLOCKED_SINCE: None}

    # -- the pass -----------------------------------------------------------------------------------------------
    def run_pass(self, snap: Snapshot) -> list[Action]:
        """Apply each node's action; nodes are independent, so up to NODE_WORKERS of them at once (a node's own
        steps stay in order: one action per node per pass)."""
        actions = self._admit(snap)

        def one(action: Action) -> None:
            with contextlib.suppress(Conflict):  # the node changed under us: the next pass reads it fresh
                self.apply(action, snap.nodes[action.node])

        # Admissions are written one after another, in the planner's (name) order: each was decided counting the
        # PDB disruptions spoken for by those before it, so the cluster's record shows them in that order too.
        for action in sorted((a for a in actions if a.kind == "start"), key=lambda a: a.node):
            one(action)
        work = [a for a in actions if a.kind != "start" and (a.kind != "hold" or a.hold in TOLD)]
        if len(work) <= 1:
            for action in work:
                one(action)
        else:
            with ThreadPoolExecutor(min(NODE_WORKERS, len(work))) as pool:
                list(pool.map(one, work))  # re-raises the first error (an outage) once all have run
        return actions

    def _admit(self, snap: Snapshot) -> list[Action]:
        """The planner's actions, after a look at the pods of each node it would start: one whose pods kubectl drain
        would refuse to evict (no controller, emptyDir data) is held before cordon instead, and the planner is asked
        again, so its slot goes to the next node. One LIST of pods per node about to start, never all pods."""
        looked: set[str] = set()
        while True:
            actions = next_actions([n.view for n in snap.nodes.values()], self.policy, snap.budgets)
            starting = [a.node for a in actions if a.kind == "start" and a.node not in looked]
            if not starting:
                return actions
            for name in starting:
                looked.add(name)
                ns = snap.nodes[name]
                if ns.view.restart_only:  # nothing is evicted from it
                    continue
                unmovable = P.unmovable(self._pods_on(ns), self.policy, ns.driver_tolerations)
                if unmovable:
                    ns.view = replace(ns.view, unmovable=tuple(unmovable))

    def apply(self, action: Action, ns: NodeState) -> None:
        if action.kind == "mark-required":
            self.move(ns, S.REQUIRED, annotations={S.TARGET: ns.target_tag})
        elif action.kind == "mark-done":
            self.move(ns, S.DONE, why=action.reason)
        elif action.kind == "hold":
            if action.hold in TOLD:
                self.block(ns, action.reason, action.hold)
        elif action.kind == "start":
            # Admitted and cordoned in one write: no pod is placed on a node between its admission (which counted
            # the pods there against their PDBs) and its cordon. Whether it was cordoned before is kept in the
            # same write, so a restart cannot lose it.
            initial = "true" if ns.facts.unschedulable else "false"
            if ns.view.restart_only:  # as the GPU Operator does: cordoned (should the restart fail), nothing moved
                if ns.device_pool is not None:
                    self.move(ns, S.POD_RESTART, annotations={**self.unblock(), S.TARGET: ns.target_tag,
                                                              S.DEVICE_TAINT: self.taint_devices(ns),
                                                              S.RESTART_START: now_iso()},
                              why=f"admitted, its GPUs tainted NoSchedule: {RESTART_IN_PLACE}")
                    return
                self.move(ns, S.POD_RESTART, annotations={**self.unblock(), S.TARGET: ns.target_tag,
                                                          S.INITIAL_UNSCHEDULABLE: initial,
                                                          S.RESTART_START: now_iso()}, unschedulable=True,
                          why=f"admitted and cordoned: {RESTART_IN_PLACE}")
                return
            if ns.device_pool is not None:  # its GPUs tainted, not the node: CPU work keeps scheduling there
                self.move(ns, S.WAIT_FOR_JOBS, annotations={**self.unblock(), S.TARGET: ns.target_tag,
                                                            S.DEVICE_TAINT: self.taint_devices(ns)},
                          why="admitted; its GPUs tainted NoSchedule (DeviceTaintRule "
                              f"{device_taint.rule_name(ns.name)}), the node left schedulable")
                return
            self.move(ns, S.CORDON, annotations={**self.unblock(), S.TARGET: ns.target_tag,
                                                 S.INITIAL_UNSCHEDULABLE: initial}, unschedulable=True,
                      why="admitted and cordoned" if initial == "false" else "admitted (already cordoned by someone "
                                                                              "else)")
        elif action.kind == "uncordon":
            self.uncordon(ns)
        elif action.kind == "finish":
            self.finish(ns, unschedulable=None, why=action.reason)
        elif action.kind == "handle":
            handler: dict[str, Callable[[NodeState], None]] = {
                S.CORDON: self.cordon, S.WAIT_FOR_JOBS: self.wait_for_jobs, S.POD_DELETION: self.pod_deletion,
                S.DRAIN: self.drain, S.POD_RESTART: self.pod_restart, S.VALIDATION: self.validation}
            if ns.view.state in handler:
                handler[ns.view.state](ns)

    # -- per state ----------------------------------------------------------------------------------------------
    def taint_devices(self, ns: NodeState) -> str:
        """Make the node's DeviceTaintRule (idempotent: applied), before the state that depends on it is written."""
        made = device_taint.rule(ns.name, ns.device_pool or ns.name, ns.target_tag)
        self.kube.apply_at(f"{device_taint.RULES}/{made['metadata']['name']}", made)
        return str(made["metadata"]["name"])

    def cordon(self, ns: NodeState) -> None:
        if ns.device_pool is not None or S.DEVICE_TAINT in ns.annotations:
            taint = self.taint_devices(ns) if ns.device_pool is not None else ns.annotations[S.DEVICE_TAINT]
            self.move(ns, S.WAIT_FOR_JOBS, annotations={S.DEVICE_TAINT: taint}, why="its GPUs tainted NoSchedule")
            return
        initial = ns.annotations.get(S.INITIAL_UNSCHEDULABLE)
        if initial is None:  # remembered once, in the same write as the cordon: a restart cannot lose it
            initial = "true" if ns.facts.unschedulable else "false"
        self.move(ns, S.WAIT_FOR_JOBS, annotations={S.INITIAL_UNSCHEDULABLE: initial}, unschedulable=True,
                  why="cordoned" if initial == "false" else "already cordoned by someone else")

    def _pods_on(self, ns: NodeState, selector: str | None = None) -> list[JSON]:
        return self.kube.pods(label_selector=selector, field_selector=f"spec.nodeName={ns.name}")

    def wait_for_jobs(self, ns: NodeState) -> None:
        wfc = self.policy.wait_for_completion
        if not wfc.pod_selector:
            self.move(ns, S.POD_DELETION, annotations={S.DELETION_START: now_iso()})
            return
        running = [p for p in self._pods_on(ns, wfc.pod_selector)
                   if view(p, Pod).status.phase in ("Running", "Pending")]
        start = ns.annotations.get(S.WAIT_START)
        if not running:
            self.move(ns, S.POD_DELETION, annotations={S.WAIT_START: None, S.DELETION_START: now_iso(),
                                                       **self.unblock()})
            return
        if start is None:
            self.annotate(ns, {S.WAIT_START: now_iso()})
        elif wfc.timeout_seconds and since(start) > wfc.timeout_seconds:
            self.move(ns, S.POD_DELETION, annotations={S.WAIT_START: None, S.DELETION_START: now_iso(),
                                                       **self.unblock()},
                      why=f"waitForCompletion timed out after {wfc.timeout_seconds}s")
            return
        names = ", ".join(P.name(p) for p in running[:3]) + (" …" if len(running) > 3 else "")
        self.block(ns, f"waiting for {names} (selected by waitForCompletion {wfc.pod_selector!r})",
                   BlockKind.WAITING_FOR_JOBS)

    def _evict(self, ns: NodeState, victims: list[Mapping[str, Any]],
               retry_delay: float) -> list[tuple[Mapping[str, Any], str]]:
        """Evict concurrently (bounded); return the refusals (pod, API message). Retries wait retry_delay."""
        key = ns.name
        if time.monotonic() - self.last_attempt.get(key, 0.0) < retry_delay:
            return [(v, "") for v in victims]  # not yet: the explicit retry delay
        self.last_attempt[key] = time.monotonic()

        def one(pod: Mapping[str, Any]) -> tuple[Mapping[str, Any], int, str]:
            meta = pod["metadata"]
            res = self.kube.evict(meta["namespace"], meta["name"])
            return pod, res.status, res.message

        with ThreadPoolExecutor(max(1, min(self.policy.eviction_concurrency, len(victims)))) as pool:
            results = list(pool.map(one, victims))
        refused = []
        for pod, status, message in results:
            if status in (200, 201, 404):
                self.say(ns.name, f"evicted {P.name(pod)}")
            else:
                refused.append((pod, message or f"HTTP {status}"))
        return refused

    def _keep_daemonsets_off(self, ns: NodeState, pods: list[JSON]) -> list[Mapping[str, Any]]:
        """DaemonSet pods holding a GPU leave through the walk's NoExecute taint (set once, kept until the new
        driver is validated); the ones still on the node."""
        holding = P.daemonset_gpu_pods(pods)
        if holding and not gpu_taint.has_taint((ns.node.get("spec") or {}).get("taints")):
            fresh = self.kube.get(f"/api/v1/nodes/{ns.name}") or ns.node
            taints = gpu_taint.with_taint((fresh.get("spec") or {}).get("taints"), ns.target_tag)
            ns.node = self.kube.patch(f"/api/v1/nodes/{ns.name}", {
                "metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]}, "spec": {"taints": taints}})
            self.say(ns.name, f"tainted {gpu_taint.KEY}:{gpu_taint.EFFECT}: DaemonSet pods holding a GPU ("
                     + ", ".join(P.name(p) for p in holding[:3]) + (" …" if len(holding) > 3 else "")
                     + ") leave, and stay off until the new driver is validated")
        return holding

    def _move_pods(self, ns: NodeState, *, drain: bool) -> None:
        cfg = self.policy.drain if drain else self.policy.pod_deletion
        start_key = DRAIN_START if drain else S.DELETION_START
        on_node = self._pods_on(ns)
        held_by_daemonsets = self._keep_daemonsets_off(ns, on_node)
        victims = P.to_move(on_node, drain=drain, selector=self.policy.drain.pod_selector if drain else "")
        # A pod kubectl drain would refuse (no controller without force, emptyDir data without deleteEmptyDir) is
        # never evicted: it is named, and the node fails once the timeout passes, as the operator's would.
        kept = [(v, why) for v in victims if (why := P.drain_refusal(v, force=cfg.force,
                                                                     delete_empty_dir=cfg.delete_empty_dir,
                                                                     drain=drain))]
        victims = [v for v in victims if v not in [k for k, _ in kept]]
        if not victims and kept:
            start = ns.annotations.get(start_key)
            if start is None:
                self.annotate(ns, {start_key: now_iso()})
            message = "refusing to evict " + kept[0][1] + (f" (and {len(kept) - 1} more)" if len(kept) > 1 else "")
            self._not_moved(ns, message, start, drain=drain)
            return
        if not victims and held_by_daemonsets:
            start = ns.annotations.get(start_key)
            if start is None:
                self.annotate(ns, {start_key: now_iso()})
            self._not_moved(ns, f"waiting for DaemonSet pod {P.name(held_by_daemonsets[0])} to leave (the "
                            f"{gpu_taint.KEY} taint)" + (f" and {len(held_by_daemonsets) - 1} more"
                                                         if len(held_by_daemonsets) > 1 else ""), start, drain=drain)
            return
        if not victims:
            self.move(ns, S.POD_RESTART, annotations={start_key: None, S.RESTART_START: now_iso(),
                                                      **self.unblock()},
                      why="node drained" if drain else "GPU pods evicted")
            return
        start = ns.annotations.get(start_key)
        if start is None:
            self.annotate(ns, {start_key: now_iso()})
        refused = [r for r in self._evict(ns, victims, cfg.retry_delay_seconds) if r[1]]
        if refused:
            pdbs = self.kube.list_raw(f"/apis/policy/v1/namespaces/{refused[0][0]['metadata']['namespace']}"
                                      "/poddisruptionbudgets")
            message = P.refusal(refused[0][0], pdbs, refused[0][1])
            if len(refused) > 1:
                message += f" (and {len(refused) - 1} more pods refused)"
            self._not_moved(ns, message, start, drain=drain)

    def _not_moved(self, ns: NodeState, message: str, start: str | None, *, drain: bool) -> None:
        """Pods that would not leave (a PDB refused, or kubectl drain's rules forbid it): named on the node until
        the timeout passes, then the drain (when enabled, after pod deletion) or upgrade-failed, as the operator."""
        cfg = self.policy.drain if drain else self.policy.pod_deletion
        if start is None or since(start) <= cfg.timeout_seconds:
            self.block(ns, message, BlockKind.EVICTION)
            return
        what = "drain" if drain else "pod deletion"
        if not drain and self.policy.drain.enable:
            self.move(ns, S.DRAIN, annotations={S.DELETION_START: None, DRAIN_START: now_iso()},
                      why=f"{what} timed out after {cfg.timeout_seconds}s ({message}): draining")
        else:
            self.move(ns, S.FAILED, annotations={S.BLOCKER: f"{what} timed out after {cfg.timeout_seconds}s: "
                                                 f"{message}", S.BLOCKER_KIND: str(BlockKind.TIMEOUT)},
                      why=f"{what} timed out after {cfg.timeout_seconds}s: {message}")

    def pod_deletion(self, ns: NodeState) -> None:
        self._move_pods(ns, drain=False)

    def drain(self, ns: NodeState) -> None:
        self._move_pods(ns, drain=True)

    def pod_restart(self, ns: NodeState) -> None:
        pod, pool = view(ns.pod, Pod) if ns.pod is not None else None, ns.pool
        if pod is not None and pool is not None and \
                pod.metadata.labels.get("controller-revision-hash") == pool.newest_hash:
            self.move(ns, S.VALIDATION, annotations={S.RESTART_START: None, S.VALIDATION_START: now_iso()},
                      why=f"driver pod {pod.metadata.ref} runs {image_tag(pod.image)}")
            return
        if pool is None:
            self.block(ns, "no driver DaemonSet selects this node", BlockKind.DRIVER_POD)
            return
        if pod is not None:
            res = self.kube.evict(pod.metadata.namespace, pod.metadata.name)
            if res.evicted:
                self.say(ns.name, f"restarting driver pod {pod.metadata.ref} (evicted; its DaemonSet is OnDelete)")
            else:
                self.block(ns, f"eviction of driver pod {pod.metadata.ref} refused: {res.message}",
                           BlockKind.DRIVER_POD)
        elif since(ns.annotations.get(S.RESTART_START)) > self.policy.validation.timeout_seconds:
            self.move(ns, S.FAILED, annotations={S.BLOCKER: "no new driver pod appeared",
                                                 S.BLOCKER_KIND: str(BlockKind.DRIVER_POD)},
                      why="no new driver pod appeared")

    def validation(self, ns: NodeState) -> None:
        pod = view(ns.pod, Pod) if ns.pod is not None else None
        problems = []
        if pod is None:
            problems.append("no driver pod")
        else:
            tag = image_tag(pod.image)
            if not pod.ready:
                state = next((cs.state.waiting.reason or "waiting" for cs in pod.status.container_statuses
                              if cs.state.waiting is not None), "not Ready")
                problems.append(f"driver pod {pod.metadata.ref} is {state}")
            branch = tag.split("-", 1)[0]
            if ns.facts.driver is None or ns.facts.driver.branch != branch:
                problems.append(f"node's driver labels show {ns.facts.driver or 'no driver'}, expected branch "
                                f"{branch}")
        validators = self._pods_on(ns, VALIDATOR_SELECTOR)
        for validator in map(lambda v: view(v, Pod), validators):
            if not validator.ready:
                problems.append(f"validator {validator.metadata.ref} not Ready")
        if not problems:
            self.move(ns, S.UNCORDON, annotations={S.VALIDATION_START: None, **self.unblock()},
                      why=f"driver {ns.facts.driver} validated")
            return
        start = ns.annotations.get(S.VALIDATION_START)
        timeout = self.policy.validation.timeout_seconds
        if start and since(start) > timeout:
            message = f"validation timed out after {timeout}s: " + "; ".join(problems)
            self.move(ns, S.FAILED, annotations={S.BLOCKER: message, S.BLOCKER_KIND: str(BlockKind.VALIDATION)},
                      why=message)
            return
        if start is None:
            self.annotate(ns, {S.VALIDATION_START: now_iso()})
        self.block(ns, "validating: " + "; ".join(problems), BlockKind.VALIDATION)

    def uncordon(self, ns: NodeState) -> None:
        fresh = self.kube.get(f"/api/v1/nodes/{ns.name}")  # check again right before uncordoning
        if fresh is None:
            return
        ann = (fresh["metadata"].get("annotations") or {})
        if rule := ann.get(S.DEVICE_TAINT):  # its GPUs were tainted, not the node: the rule goes, the node stays
            code = self.kube.delete(f"{device_taint.RULES}/{rule}")
            if code not in (200, 202, 404):  # the GPUs would stay tainted after a walk called done
                self.block(ns, f"its GPUs stay tainted: DeviceTaintRule {rule} could not be deleted (HTTP {code}; "
                               "the walk needs delete on devicetaintrules)", BlockKind.OTHER)
                return
            ns.node = fresh
            self.finish(ns, unschedulable=None, why=f"its GPUs untainted (DeviceTaintRule {rule} deleted)")
            return
        # k8s-operator-libs sets the initial state only when the node was cordoned before the walk ("true");
        # gpualign writes "false" as well: absent or "false", the walk cordoned it
        if ann.get(S.INITIAL_UNSCHEDULABLE) == "true":
            self.finish(ns, unschedulable=None, why="was cordoned before the upgrade: left cordoned")
            return
        ns.node = fresh
        self.finish(ns, unschedulable=False, why="uncordoned")

    def finish(self, ns: NodeState, *, unschedulable: bool | None, why: str) -> None:
        cleared: dict[str, str | None] = dict.fromkeys((*S.OURS, DRAIN_START, S.INITIAL_UNSCHEDULABLE,
                                                        S.DEVICE_TAINT))
        taints = (ns.node.get("spec") or {}).get("taints")
        untaint = gpu_taint.without_taint(taints) if gpu_taint.has_taint(taints) else None
        self.move(ns, S.DONE, annotations=cleared, unschedulable=unschedulable, taints=untaint,
                  why=why + ("; its DaemonSet GPU pods may come back" if untaint is not None else ""))


DRAIN_START = "gpualign.io/upgrade-drain-start-time"

