"""Wire the controller together, by construction: the caches its watches feed, the findings and who listens to
them (metrics, the build trigger), the ledger, the alarm's publisher and the gate's writer, the reconciler's
workers, the refresher, leader election and HTTP."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from gpualign.base import labels as L
from gpualign.base.errors import GpualignError
from gpualign.base.json_types import JSON
from gpualign.controller import gate
from gpualign.controller.board import board_view, fleet_view
from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger
from gpualign.controller.caches import Caches
from gpualign.controller.findings import Findings, OnMissing
from gpualign.controller.gate_writer import GateWriter
from gpualign.controller.ledger_view import Judge, LedgerView
from gpualign.controller.metrics import Metrics
from gpualign.controller.node_finding import NodeFinding
from gpualign.controller.publisher import Publisher
from gpualign.controller.pull_restart import PullRestarter
from gpualign.controller.reactions import Alarm, Gate, Rejudge, RestartWaiting
from gpualign.controller.reboot_gate import RebootGate
from gpualign.controller.reconciler import Reconciler, WorkQueue
from gpualign.controller.server import serve
from gpualign.controller.walk_admission import PDBS, WalkAdmission
from gpualign.kube import dra_reads
from gpualign.kube.client import Kube
from gpualign.kube.lease import LeaseElector
from gpualign.kube.watch import Watcher
from gpualign.ledger.sources import Ledger, RepoLedgers
from gpualign.model.branches import BranchPolicy
from gpualign.model.dra_floor import DRIVER as DRA_DRIVER
from gpualign.model.facts import NodeFacts
from gpualign.model.operator_config import OperatorConfig
from gpualign.model.tags import Rules
from gpualign.upgrade import states as S
from gpualign.upgrade.gate_admission import operator_policy
from gpualign.upgrade.upgrade_policy import UpgradePolicy

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
    restart_waiting_pods: bool = False  # --restart-waiting-driver-pods: a driver pod waiting for an image now there
    archive_every: float | None = None  # --build-ahead-from-archive: seconds between reads of Debian's archive
    trusted: tuple[Any, ...] = ()  # the keys a present image must be signed by (none: signatures not checked)


def run(kube: Kube, rules: Rules, branches: BranchPolicy,
        load_ledger: Callable[[OperatorConfig | None], Ledger | RepoLedgers], opts: Options,
        stop: threading.Event | None = None, *, operator: OperatorConfig | None = None,
        follow_operator: bool = False, judge_image: Judge | None = None) -> None:
    stop = stop or threading.Event()
    work = WorkQueue()
    caches = Caches(requeue=work.put)
    elector = _elector(kube, opts, caches, stop)

    def is_leader() -> bool:
        return elector.leader if elector is not None else True

    def election_problem() -> str | None:
        return elector.problem if elector is not None else None

    def unready() -> str | None:  # a Lease unwritable for longer than a lease duration: not ready, and why
        if elector is not None and elector.problem and \
                time.monotonic() - elector.problem_since > opts.lease_seconds:
            return f"not ready: {elector.problem}"
        return None

    builder: BuildTrigger | None = None  # made below, once the ledger (its Events name it) was first read
    metrics = Metrics(lambda: fleet_view(findings.snapshot().values(), caches.snapshot(), leader=is_leader()),
                      election_problem, builds=lambda: builder.status() if builder is not None else {"running": []})
    wake_builds = threading.Event()  # a node began to wait for a tag: the build trigger decides now
    wakes = [_wake(wake_builds)] if opts.builds is not None else []

    findings = _findings(metrics, wakes)
    ledger = LedgerView(load_ledger, judge_image or (lambda _i, _a, _m: None))
    writer = GateWriter(kube, caches, ledger, retry=work.put_one, warn_after=opts.gate_warn_after)
    reconciler = Reconciler(
        kube=kube, rules=rules, branches=branches, repository=opts.repository, work=work, caches=caches,
        findings=findings, ledger=ledger, gate=writer,
        operator=operator, follow_operator=follow_operator, gating=opts.gate and operator is not None,
        is_leader=is_leader, on_checked=metrics.check_duration.observe)
    reconciler.reactions += [
        Alarm(Publisher(kube, retry=work.put_one)),
        Gate(writer, gating=lambda: reconciler.gating and reconciler.operator is not None),
        *([RestartWaiting(PullRestarter(kube))] if opts.restart_waiting_pods else [])]

    if reconciler.gating:
        writer.admission = _walk_admission(kube, caches, reconciler)

    watch: Any = None  # the archive watch, made below once the ledger was first read
    gate: RebootGate | None = None  # the reboot gate, made below with the archive watch

    def board() -> dict[str, object]:
        view = board_view(findings.snapshot().values(), caches.snapshot(), leader=is_leader(),
                          updated=reconciler.updated, ledger_sources=ledger.ledger.sources, cluster=kube.server)
        return {**view, **({"builds": builder.status()} if builder is not None else {}),
                **({"archive": watch.board()} if watch is not None else {}),
                **({"reboot": [v.as_dict() for v in gate.snapshot()]} if gate is not None else {})}

    _say_trust(opts.trusted)
    server = serve(opts.listen, metrics.registry, board, unready)  # serving before the first (slow) ledger read
    log.info("serving /metrics and the fleet board on http://%s:%d", *server.server_address[:2])
    try:
        reconciler.refresh_ledger()
    except GpualignError as err:
        log.error("ledger: %s (retrying every %.0fs)", err.message, opts.ledger_refresh)
    watch, gate = _archive_and_reboot_gate(opts, caches, reconciler, findings, metrics, wake_builds)

    def ahead() -> dict[str, NodeFinding]:
        return {**findings.ahead_snapshot(), **(watch.snapshot() if watch is not None else {})}

    if opts.builds is not None:
        builder = BuildTrigger(kube, opts.builds, findings.snapshot, is_leader=is_leader,
                               on_started=lambda _tag: metrics.builds_started.inc(),
                               on_finished=metrics.build_finished, ahead=ahead,
                               listed=reconciler.in_ledger, ledger_name=", ".join(ledger.ledger.sources),
                               wake=wake_builds)

    loops: list[tuple[str, Callable[[threading.Event], None]]] = [
        *((f"check-{i}", reconciler.worker) for i in range(opts.workers)),  # a burst of new nodes, in parallel
        ("ledger", lambda until: _refresher(reconciler, opts.ledger_refresh, until)),
        *([("builds", builder.run)] if builder is not None else []),
        *([("archive", watch.run)] if watch is not None else [])]
    _serve_until_stopped(_watchers(kube, caches, reconciler, stop, operator is not None), elector, loops, stop)
    server.shutdown()


def _archive_and_reboot_gate(opts: Options, caches: Caches, reconciler: Reconciler, findings: Findings,
                             metrics: Metrics, wake_builds: threading.Event) -> tuple[Any, RebootGate]:
    """The archive watch (--build-ahead-from-archive, with --build) and the reboot gate, judging each node after
    each check and the whole fleet after each read of the archive; both exported as metrics."""
    watch: Any = None
    if opts.builds is not None and opts.archive_every:
        from gpualign.controller.archive_watch import ArchiveWatch
        from gpualign.usecases.archive_next import debian_archive

        index, seen = debian_archive()
        watch = ArchiveWatch(caches.node_list, reconciler.future, index, seen=seen, every=opts.archive_every,
                             on_change=wake_builds.set,
                             on_landed=lambda pool, seconds: metrics.archive_to_image.observe(seconds))
        metrics.watch_archive(watch.pending)
        reconciler.on_ledger_changed.append(watch.rejudge)
    gate = RebootGate(lambda name: caches.node(name)[0], caches.names, lambda n: findings.snapshot().get(n),
                      lambda n: findings.ahead_snapshot().get(n), reconciler.future,
                      unjudged=reconciler.ledger.unjudged, archive=watch)
    reconciler.reactions.append(Rejudge(gate.judge))
    if watch is not None:
        watch.on_read.append(gate.judge_all)
    metrics.watch_reboots(gate.snapshot, lambda: (watch.read_at, watch.every) if watch is not None else None)
    return watch, gate


def _findings(metrics: Metrics, wakes: list[OnMissing]) -> Findings:
    """The nodes' findings, whose missing images (now, and for the kernel each node boots next) are gauges, log
    lines and wake-ups of the build trigger."""
    def say_missing(node: str, tag: str) -> None:
        log.warning("node %s needs driver image %s, missing from the ledger", node, tag)

    def say_ahead_missing(node: str, tag: str) -> None:
        ahead = findings.ahead_snapshot().get(node)
        nxt = f"kernel {ahead.kernel if ahead else None}" + (f" on {ahead.os_next}" if ahead and ahead.os_next else "")
        log.warning("node %s will boot %s next: its driver image %s is missing from the ledger", node, nxt, tag)

    findings = Findings(on_missing=[_missing_gauge(metrics.image_missing, say_missing), *wakes],
                        on_ahead_missing=[_missing_gauge(metrics.next_kernel_missing, say_ahead_missing), *wakes])
    return findings


def _walk_admission(kube: Kube, caches: Caches, reconciler: Reconciler) -> WalkAdmission:
    """Who may join the GPU Operator's walk (the gate's PDB and GPU-holder rule), by the upgradePolicy the
    operator's objects give each node now."""
    def walk_policy(facts: NodeFacts) -> UpgradePolicy:
        config = reconciler.operator
        return operator_policy(config.walk_policy_for(facts.labels) if config is not None else {})

    return WalkAdmission(kube, caches.node_list, walk_policy)


def _elector(kube: Kube, opts: Options, caches: Caches, stop: threading.Event) -> LeaseElector | None:
    """The Lease elector (None without --leader-elect). A new leader re-checks everything, so alarms raised while it
    stood by are published. A missing namespace or a forbidden Lease stops the start (exit 2), never a silent
    standby."""
    if not opts.leader_elect:
        return None
    elector = LeaseElector(kube, opts.lease_namespace, opts.lease_name, opts.identity or socket.gethostname(),
                           lease_seconds=opts.lease_seconds, renew_seconds=opts.renew_seconds,
                           retry_seconds=opts.retry_seconds, stop=stop,
                           on_change=lambda leader: caches.requeue(caches.names()) if leader else None)
    elector.check_writable()
    return elector


def _say_trust(trusted: tuple[Any, ...]) -> None:
    """Which keys an image must be signed by, said once."""
    if trusted:
        log.info("driver images must be signed by %s (cosign's format): an unsigned one is never present",
                 ", ".join(k.name for k in trusted))
    else:
        log.info("driver image signatures are not checked: set $GPUALIGN_TRUSTED_KEYS (the chart's "
                 "signatures.trustedKeys) to count an image present only when a trusted key signed it")


def _serve_until_stopped(watchers: list[Watcher], elector: LeaseElector | None,
                         loops: list[tuple[str, Callable[[threading.Event], None]]], stop: threading.Event) -> None:
    """Start the watches, the election and each loop on its own thread, then wait for the stop (SIGTERM, SIGINT,
    or the caller's event) and give the Lease up."""
    for w in watchers:
        w.start()
    if elector:
        elector.start()
    for name, loop in loops:
        threading.Thread(target=loop, args=(stop,), name=name, daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    if elector:
        elector.release()


def _watchers(kube: Kube, caches: Caches, reconciler: Reconciler, stop: threading.Event,
              with_operator: bool) -> list[Watcher]:
    driver = f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"
    watchers = [
        # every node: a GPU node is one by any of its labels (gpualign.model.facts.GPU_LABELS), which no one
        # label selector can ask for; the caches keep the GPU nodes
        Watcher(kube, "/api/v1/nodes", label_selector=None, metadata_only=True,
                on_sync=caches.sync_nodes, on_event=caches.node_event, stop=stop, name="watch-nodes"),
        Watcher(kube, "/api/v1/pods", label_selector=driver, metadata_only=False, on_sync=caches.sync_pods,
                on_event=caches.pod_event, stop=stop, name="watch-driver-pods"),
        Watcher(kube, "/apis/apps/v1/daemonsets", label_selector=driver, metadata_only=False,
                on_sync=caches.sync_pools, on_event=caches.pool_event, stop=stop, name="watch-driver-daemonsets"),
        # NVIDIA's DRA devices: in the GPU Operator's DRA mode a node's driver version is published there, not in
        # GFD labels; a cluster before Kubernetes 1.34 serves no resource.k8s.io/v1, asked again now and then
        Watcher(kube, dra_reads.PATH, label_selector=None, metadata_only=False,
                field_selector=f"spec.driver={DRA_DRIVER}", absent_retry=300.0,
                on_sync=caches.sync_slices, on_event=caches.slice_event, stop=stop, name="watch-resourceslices"),
    ]
    if reconciler.gating:
        # A budget that grows back lets a held node into the walk: the nodes asking are looked at again
        admission = reconciler.gate.admission
        assert admission is not None  # made with the gate (run)

        def asking() -> None:
            reconciler.work.put([f.name for f in caches.node_list()
                                 if f.labels.get(S.STATE_LABEL) == S.REQUIRED and gate.GATED in f.annotations])

        def listed(items: list[JSON]) -> None:
            admission.sync_pdbs(items)
            asking()

        def changed(kind: str, obj: JSON) -> None:
            admission.pdb_event(kind, obj)
            asking()

        watchers.append(Watcher(kube, PDBS, label_selector=None, metadata_only=False, on_sync=listed,
                                on_event=changed, stop=stop, name="watch-pdbs"))
    if with_operator:
        # The operator's objects: a version change re-checks every node at once, so the gate's skip label lands
        # before the operator's own walk (CR -> DaemonSet -> upgrade controller) can cordon a node.
        def operator_changed(*_: object) -> None:
            try:
                reconciler.refresh_operator()
            except GpualignError as err:
                log.error("operator configuration: %s", err.message)

        for path, name in (("/apis/nvidia.com/v1/clusterpolicies", "watch-clusterpolicies"),
                           ("/apis/nvidia.com/v1alpha1/nvidiadrivers", "watch-nvidiadrivers")):
            watchers.append(Watcher(kube, path, label_selector=None, metadata_only=False,
                                    on_sync=lambda _items: operator_changed(), on_event=lambda *_: operator_changed(),
                                    stop=stop, name=name))
    return watchers


def _refresher(reconciler: Reconciler, every: float, stop: threading.Event) -> None:
    """The ledger and the operator's objects read again every `every` seconds; old holds, and nodes whose last write
    the watch never showed, looked at again."""
    while not stop.wait(every):
        reconciler.work.put(reconciler.caches.unseen_too_long())
        if reconciler.gating:
            reconciler.work.put(reconciler.gate.overdue(reconciler.caches.node_list()))
        try:
            if reconciler.refresh_ledger():
                log.info("ledger changed: re-checking every node")
        except GpualignError as err:
            log.error("ledger: %s", err.message)
        try:
            if reconciler.refresh_operator():
                log.info("the GPU Operator's driver configuration changed: re-checking every node")
        except GpualignError as err:
            log.error("operator configuration: %s", err.message)


def _missing_gauge(gauge: Gauge, say: Callable[[str, str], None]) -> OnMissing:
    """A missing-tag listener: the gauge's series for (node, tag) set while the node waits, and one log line."""
    def listener(node: str, old: str | None, new: str | None) -> None:
        if old:
            gauge.remove(node, old)
        if new:
            gauge.labels(node, new).set(1)
            say(node, new)
    return listener


def _wake(event: threading.Event) -> OnMissing:
    def listener(_node: str, _old: str | None, new: str | None) -> None:
        if new:
            event.set()
    return listener
