"""Prometheus metrics (prometheus-client). Fleet-wide gauges are computed at scrape time from the cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpualign.upgrade.blockers import kind_of


class FleetCollector(Collector):
    """gpualign_gpu_nodes, gpualign_upgrade_nodes{state}, gpualign_upgrade_blocked_seconds{node,reason},
    gpualign_missing_driver_images, gpualign_stuck_nodes, gpualign_gated_nodes: derived from the fleet cache at each
    scrape, so they are never stale."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self.snapshot()
        yield GaugeMetricFamily("gpualign_gpu_nodes",
                                "GPU nodes (an NVIDIA PCI device, or nvidia.com/gpu.present=true) watched",
                                value=len(data["nodes"]))
        states = GaugeMetricFamily("gpualign_upgrade_nodes",
                                   "GPU nodes per nvidia.com/gpu-driver-upgrade-state (none: no label)",
                                   labels=["state"])
        for state, count in sorted(data["upgrade_counts"].items()):
            states.add_metric([state], count)
        yield states
        blocked = GaugeMetricFamily("gpualign_upgrade_blocked_seconds",
                                    "Seconds a node's driver upgrade has been blocked, by the kind of reason (pdb, "
                                    "unmovable, skipped, image-missing, image-wrong, image-unverified, "
                                    "waiting-for-jobs, eviction, driver-pod, validation, timeout, other); "
                                    "`gpualign why NODE` says it whole",
                                    labels=["node", "reason"])
        for node, reason, seconds in data["blocked"]:
            blocked.add_metric([node, data.get("blocked_kinds", {}).get(node) or kind_of(reason)], seconds)
        yield blocked
        yield GaugeMetricFamily("gpualign_missing_driver_images",
                                "Distinct driver image tags some GPU node needs and the ledger lacks",
                                value=len(data["missing"]))
        yield GaugeMetricFamily("gpualign_wrong_driver_images",
                                "Distinct driver image tags in the ledger whose own labels name another kernel or "
                                "branch than their tag (present but wrong)", value=len(data.get("wrong") or {}))
        yield GaugeMetricFamily("gpualign_leader", "Whether this replica holds the lease (1) or stands by (0)",
                                value=data["leader"])
        yield GaugeMetricFamily("gpualign_stuck_nodes", "GPU nodes with no running driver pod, or blocked in the walk",
                                value=len(data.get("stuck") or []))
        held = GaugeMetricFamily("gpualign_gate_held_seconds",
                                 "Seconds the gate has held a node out of the GPU Operator's upgrade walk, by what "
                                 "holds it (kind: image, pdb, unmovable, other; pdb: the PodDisruptionBudget)",
                                 labels=["node", "kind", "pdb"])
        by = data.get("gated_by") or {}
        for node, seconds in sorted((data.get("gated_for") or {}).items()):
            held.add_metric([node, *by.get(node, ("image", ""))], seconds)
        yield held
        yield GaugeMetricFamily("gpualign_gated_nodes",
                                "GPU nodes the gate holds out of the GPU Operator's upgrade walk",
                                value=len(data.get("gated") or {}))


class BuildsCollector(Collector):
    """gpualign_driver_image_not_buildable{tag,action} (nodes waiting for a missing image gpualign does not build:
    render its recipe, or make it by hand) and gpualign_build_attempt{tag} (the attempt of each tag's build Job, counted
    across retries), from the build trigger's last pass."""

    def __init__(self, view: Callable[[], dict[str, Any]]) -> None:
        self.view = view

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self.view()
        refused = GaugeMetricFamily("gpualign_driver_image_not_buildable",
                                    "GPU nodes waiting for a missing driver image gpualign does not build (action "
                                    "render: build its recipe elsewhere; none: make it by hand); no Job is made",
                                    labels=["tag", "action"])
        for tag, entry in sorted((data.get("not_buildable") or {}).items()):
            refused.add_metric([tag, entry["action"]], len(entry["nodes"]))
        yield refused
        attempts = GaugeMetricFamily("gpualign_build_attempt",
                                     "The attempt number of each tag's build Job, counted across retries",
                                     labels=["tag", "phase"])
        for tag, job in sorted((data.get("jobs") or {}).items()):
            attempts.add_metric([tag, job["phase"]], job["attempt"])
        yield attempts


class ArchiveCollector(Collector):
    """gpualign_archive_kernel_driver_image_missing{pool,node,tag,kernel} (each node of a pool whose next kernel, as
    Debian's archive names it, has no image yet: hold its reboot) and gpualign_archive_kernel_not_buildable{pool,tag,
    kernel} (a next kernel nobody can make, with no Job), from the archive watch's last judgement."""

    def __init__(self, pending: Callable[[], list[Any]]) -> None:
        self.pending = pending

    def collect(self) -> Iterator[GaugeMetricFamily]:
        missing = GaugeMetricFamily("gpualign_archive_kernel_driver_image_missing",
                                    "1 for each GPU node of a pool whose next kernel, as Debian's archive names it "
                                    "(the one unattended-upgrades installs), has no driver image in the ledger yet: "
                                    "hold its reboot (kured)", labels=["pool", "node", "tag", "kernel"])
        refused = GaugeMetricFamily("gpualign_archive_kernel_not_buildable",
                                    "1 for a pool's next kernel (Debian's archive) that no one can make a driver "
                                    "image for (NVIDIA refuses PREEMPT_RT kernels, no module source, ...): no Job "
                                    "is made, and its nodes' reboots stay held", labels=["pool", "tag", "kernel"])
        for p in self.pending():
            for node in p.nodes:
                missing.add_metric([p.pool, node, p.tag, p.kernel], 1)
            if not p.buildable:
                refused.add_metric([p.pool, p.tag, p.kernel], 1)
        yield missing
        yield refused


class RebootCollector(Collector):
    """The reboot gate, per node (gpualign.controller.reboot_gate): gpualign_node_reboot_held{node,kernel,tag,hold} 1
    for each GPU node that must not reboot tonight, gpualign_node_reboot_ready{node,kernel,tag} 1 or 0 for every
    one; and, where Debian's archive is watched, when it was last read and how often it is polled, so that an alert
    fires on a reading gone stale (and on the series' absence, when no controller answers)."""

    def __init__(self, verdicts: Callable[[], list[Any]], archive: Callable[[], tuple[float, float] | None]) -> None:
        self.verdicts, self.archive = verdicts, archive

    def collect(self) -> Iterator[GaugeMetricFamily]:
        held = GaugeMetricFamily("gpualign_node_reboot_held",
                                 "1 for each GPU node that must not reboot tonight: the image of the kernel it boots "
                                 "next is not present and judged (hold: missing, cannot-be-made, wrong, unsigned, "
                                 "unjudged)", labels=["node", "kernel", "tag", "hold"])
        ready = GaugeMetricFamily("gpualign_node_reboot_ready",
                                  "1 when a GPU node may reboot tonight (the image of the kernel it boots next is in "
                                  "the ledger and judged right), else 0", labels=["node", "kernel", "tag"])
        for v in self.verdicts():
            ready.add_metric([v.node, v.kernel or "", v.tag or ""], 1.0 if v.ready else 0.0)
            if not v.ready:
                held.add_metric([v.node, v.kernel or "", v.tag or "", str(v.hold)], 1.0)
        yield held
        yield ready
        archive = self.archive()
        if archive is not None:
            read_at, every = archive
            yield GaugeMetricFamily("gpualign_archive_read_timestamp_seconds",
                                    "When Debian's archive was last read whole (0: not yet): older than two polls, "
                                    "the reboot gate's alert holds every node", value=read_at)
            yield GaugeMetricFamily("gpualign_archive_poll_seconds", "How often Debian's archive is read",
                                    value=every)


class Metrics:
    def __init__(self, snapshot: Callable[[], dict[str, Any]],
                 election_problem: Callable[[], str | None] = lambda: None,
                 builds: Callable[[], dict[str, Any]] = lambda: {"running": []}) -> None:
        self.registry = CollectorRegistry()
        failing = Gauge("gpualign_leader_election_failing",
                        "1 while this replica cannot read or write its Lease (so it can never lead)",
                        registry=self.registry)
        failing.set_function(lambda: 1.0 if election_problem() else 0.0)
        self.image_missing = Gauge("gpualign_node_driver_image_missing",
                                   "1 while a GPU node needs a driver image tag the ledger lacks",
                                   ["node", "tag"], registry=self.registry)
        self.next_kernel_missing = Gauge("gpualign_next_kernel_driver_image_missing",
                                         "1 while the kernel (gpualign.io/kernel.next) or OS (gpualign.io/os.next) "
                                         "a GPU node will boot next needs a driver image tag the ledger lacks: hold "
                                         "its reboot (kured)",
                                         ["node", "tag"], registry=self.registry)
        self.check_duration = Histogram("gpualign_check_duration_seconds",
                                        "Time to re-check one node against the ledger",
                                        buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
                                        registry=self.registry)
        self.registry.register(FleetCollector(snapshot))
        # the build trigger (--build)
        self.builds_view = builds
        self.registry.register(BuildsCollector(lambda: self.builds_view()))
        running = Gauge("gpualign_builds_running", "Build Jobs running now (--build)", registry=self.registry)
        running.set_function(lambda: float(len(self.builds_view().get("running") or [])))
        self.builds_started = Counter("gpualign_builds_started", "Build Jobs created (--build)",
                                      registry=self.registry)
        self.builds_total = Counter("gpualign_builds", "Build Jobs finished, by result (--build)", ["result"],
                                    registry=self.registry)
        self.build_duration = Histogram("gpualign_build_duration_seconds", "A build Job's time from start to end",
                                        buckets=(30, 60, 120, 300, 600, 1200, 3600), registry=self.registry)

    def watch_archive(self, pending: Callable[[], list[Any]]) -> None:
        """The archive watch's gauges, and the seconds from its first naming a kernel to the kernel's image."""
        self.registry.register(ArchiveCollector(pending))
        self.archive_to_image = Histogram(
            "gpualign_archive_kernel_to_image_seconds",
            "Seconds from Debian's archive first naming a pool's next kernel (as this controller read it) to the "
            "kernel's driver image being in the ledger", buckets=(60, 300, 900, 1800, 3600, 7200, 21600, 86400),
            registry=self.registry)

    def watch_reboots(self, verdicts: Callable[[], list[Any]],
                      archive: Callable[[], tuple[float, float] | None]) -> None:
        """The reboot gate's gauges (kured's alert filter reads the alerts made of them)."""
        self.registry.register(RebootCollector(verdicts, archive))

    def build_finished(self, _tag: str, result: str, seconds: float | None) -> None:
        self.builds_total.labels(result).inc()
        if seconds is not None:
            self.build_duration.observe(seconds)
