"""Wire the controller together: watches, the check worker, the ledger refresher, leader election, HTTP."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpualign.base import labels as L
from gpualign.base.errors import GpualignError
from gpualign.controller.builder import Builder, BuildOptions
from gpualign.controller.metrics import Metrics
from gpualign.controller.server import serve
from gpualign.controller.state import ClusterState
from gpualign.kube.client import Kube
from gpualign.kube.lease import LeaseElector
from gpualign.kube.watch import Watcher
from gpualign.ledger.sources import Ledger, RepoLedgers
from gpualign.model.branches import BranchPolicy
from gpualign.model.operator_config import OperatorConfig
from gpualign.model.tags import Rules

log = logging.getLogger("gpualign.controller")


@dataclass
class Options:
    repository: str
    ledger_refresh: float = 60.0
    listen: tuple[str, int] = ("0.0.0.0", 8080)
    leader_elect: bool = True
    lease_namespace: str = "gpualign-system"
    lease_name: str = "gpualign-controller"
    identity: str = ""
    lease_seconds: float = 15.0
    renew_seconds: float = 10.0
    retry_seconds: float = 2.0
    workers: int = 8
    gate: bool = False
    gate_warn_after: float = 86400.0
    builds: BuildOptions | None = None  # --build: the build trigger


def run(kube: Kube, rules: Rules, policy: BranchPolicy,
        load_ledger: Callable[[OperatorConfig | None], Ledger | RepoLedgers], opts: Options,
        stop: threading.Event | None = None, *, operator: OperatorConfig | None = None,
        follow_operator: bool = False,
        judge_image: Callable[[str, str, str | None], str | None] | None = None) -> None:
    stop = stop or threading.Event()
    identity = opts.identity or socket.gethostname()
    elector: LeaseElector | None = None
    state = ClusterState(kube, rules, policy, opts.repository, load_ledger, operator=operator,
                  follow_operator=follow_operator, gate=opts.gate and operator is not None,
                  gate_warn_after=opts.gate_warn_after)
    if judge_image is not None:
        state.judge_image = judge_image

    def on_leader(leader: bool) -> None:
        if leader:  # a new leader re-checks everything, so alarms raised while it stood by are published
            for name in list(state.nodes):
                state.queue.put(name)

    if opts.leader_elect:
        elector = LeaseElector(kube, opts.lease_namespace, opts.lease_name, identity,
                               lease_seconds=opts.lease_seconds, renew_seconds=opts.renew_seconds,
                               retry_seconds=opts.retry_seconds, stop=stop, on_change=on_leader)
        state.is_leader = lambda: elector.leader
        elector.check_writable()  # a missing namespace or forbidden Lease: exit 2 now, not a silent standby
    is_leader = state.is_leader

    def election_problem() -> str | None:
        return elector.problem if elector is not None else None

    def unready() -> str | None:  # a Lease unwritable for longer than a lease duration: not ready, and why
        if elector is not None and elector.problem and \
                time.monotonic() - elector.problem_since > opts.lease_seconds:
            return f"not ready: {elector.problem}"
        return None

    metrics = Metrics(lambda: state.view(is_leader(), with_nodes=False), election_problem)
    state.on_checked = metrics.check_duration.observe

    def on_missing(node: str, old: str | None, new: str | None) -> None:
        if old:
            metrics.image_missing.remove(node, old)
        if new:
            metrics.image_missing.labels(node, new).set(1)
            log.warning("node %s needs driver image %s, missing from the ledger", node, new)

    state.on_missing = on_missing

    def on_ahead_missing(node: str, old: str | None, new: str | None) -> None:
        if old:
            metrics.next_kernel_missing.remove(node, old)
        if new:
            metrics.next_kernel_missing.labels(node, new).set(1)
            ahead = state.ahead.get(node) or {}
            nxt = f"kernel {ahead.get('kernel')}" + (f" on {ahead['os']}" if ahead.get("os") else "")
            log.warning("node %s will boot %s next: its driver image %s is missing from the ledger", node, nxt, new)

    state.on_ahead_missing = on_ahead_missing
    extra: dict[str, Callable[[], object]] = {}  # parts of the board that only some controllers have (builds)

    def board() -> dict[str, object]:
        return {**state.view(is_leader()), **{name: part() for name, part in extra.items()}}

    server = serve(opts.listen, metrics.registry, board, unready)
    log.info("serving /metrics and the fleet board on http://%s:%d", *server.server_address[:2])
    try:
        state.refresh_ledger()
    except GpualignError as err:
        log.error("ledger: %s (retrying every %.0fs)", err.message, opts.ledger_refresh)

    watchers = [
        Watcher(kube, "/api/v1/nodes", label_selector=f"{L.GPU_PRESENT}=true", metadata_only=True,
                on_sync=state.sync_nodes, on_event=state.node_event, stop=stop, name="watch-nodes"),
        Watcher(kube, "/api/v1/pods", label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}",
                metadata_only=False, on_sync=state.sync_pods, on_event=state.pod_event, stop=stop,
                name="watch-driver-pods"),
        Watcher(kube, "/apis/apps/v1/daemonsets",
                label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}", metadata_only=False,
                on_sync=state.sync_pools, on_event=state.pool_event, stop=stop, name="watch-driver-daemonsets"),
    ]
    if operator is not None:
        # The operator's objects: a version change re-checks every node at once, so the gate's skip label lands
        # before the operator's own walk (CR -> DaemonSet -> upgrade controller) can cordon a node.
        def operator_changed(*_: object) -> None:
            try:
                state.refresh_operator()
            except GpualignError as err:
                log.error("operator configuration: %s", err.message)

        for path, name in (("/apis/nvidia.com/v1/clusterpolicies", "watch-clusterpolicies"),
                           ("/apis/nvidia.com/v1alpha1/nvidiadrivers", "watch-nvidiadrivers")):
            watchers.append(Watcher(kube, path, label_selector=None, metadata_only=False,
                                    on_sync=lambda _items: operator_changed(), on_event=lambda *_: operator_changed(),
                                    stop=stop, name=name))
    for w in watchers:
        w.start()
    if elector:
        elector.start()
    for i in range(opts.workers):  # writes are round trips: a burst of new nodes is alarmed in parallel
        threading.Thread(target=state.worker, args=(stop,), name=f"check-{i}", daemon=True).start()

    def refresher() -> None:
        while not stop.wait(opts.ledger_refresh):
            if state.gate:
                for name in state.overdue_holds():
                    state.queue.put(name)
            try:
                if state.refresh_ledger():
                    log.info("ledger changed: re-checking every node")
            except GpualignError as err:
                log.error("ledger: %s", err.message)
            try:
                if state.refresh_operator():
                    log.info("the GPU Operator's driver configuration changed: re-checking every node")
            except GpualignError as err:
                log.error("operator configuration: %s", err.message)

    threading.Thread(target=refresher, name="ledger", daemon=True).start()
    if opts.builds is not None:
        def listed(image: str) -> bool:
            """After a Job says it pushed: the ledger read anew (its nodes re-checked when it changed)."""
            state.refresh_ledger()
            return state._in_ledger(image)

        builder = Builder(kube, opts.builds, lambda: dict(state.findings), is_leader=is_leader,
                          on_started=lambda _tag: metrics.builds_started.inc(),
                          on_finished=metrics.build_finished, ahead=lambda: dict(state.ahead), listed=listed,
                          ledger_name=", ".join(state.ledger.sources))
        previous = state.on_missing

        def on_missing_and_build(node: str, old: str | None, new: str | None) -> None:
            previous(node, old, new)
            if new:
                builder.wake.set()  # a node began to wait: decide now, not at the next pass

        state.on_missing = on_missing_and_build
        previous_ahead = state.on_ahead_missing

        def on_ahead_missing_and_build(node: str, old: str | None, new: str | None) -> None:
            previous_ahead(node, old, new)
            if new:
                builder.wake.set()

        state.on_ahead_missing = on_ahead_missing_and_build
        metrics.builds_view = builder.view
        extra["builds"] = builder.view
        threading.Thread(target=builder.run, args=(stop,), name="builds", daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    if elector:
        elector.release()
    server.shutdown()
