"""Debian's archive as the announcement (`gpualign controller --build`, unless --no-build-ahead-from-archive): on
a schedule, the kernel the archive will install next on each pool the fleet runs (gpualign.usecases.archive_next,
through the verified door), judged as the pool's nodes would be on it, and handed to the build trigger as an image
to build ahead, before any node installs it. A node waiting now always goes first (the trigger's order); a kernel
that cannot be built makes no Job, only the trigger's refusal Event, on the pool's nodes.

What it knows is also the reboot gate's (gpualign.controller.reboot_gate: each node's next kernel, judged on its
own, and when the archive was last read: `gpualign_archive_read_timestamp_seconds`), the board's, and the measure of
how long an announced kernel waited for its image (`gpualign_archive_kernel_to_image_seconds`). A changed ledger
re-judges the pools at once, without reading the archive again, so the gate opens when the image lands, not at the
next poll.

A poll costs each suite's InRelease asked with If-Modified-Since, and a Packages index only when the suite changed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpualign.base.errors import GpualignError
from gpualign.base.json_types import JSON
from gpualign.controller.node_finding import NodeFinding
from gpualign.model.audit import Status
from gpualign.model.facts import NodeFacts
from gpualign.model.kernels import Kernel
from gpualign.model.makers import Maker
from gpualign.usecases import archive_next

log = logging.getLogger("gpualign.controller")
PREFIX = "archive/"  # the trigger's key of a pool the archive announces for (no node is named so: "/" is not in one)


@dataclass(frozen=True)
class Pending:
    """A pool whose next kernel's image is not in the ledger: its nodes must not reboot into it yet."""

    pool: str
    nodes: tuple[str, ...]
    kernel: str
    tag: str
    buildable: bool
    why: str  # one line: missing (and being built ahead), or why nobody can make it


@dataclass
class ArchiveWatch:
    nodes: Callable[[], list[NodeFacts]]  # the fleet's GPU nodes (the controller's cache)
    future: Callable[[NodeFacts, str], NodeFinding]  # a node's finding on another kernel (its label)
    index: archive_next.Indexes
    seen: Path | None = None  # first sightings, kept across restarts where the cache is kept
    every: float = 900.0
    on_change: Callable[[], None] = lambda: None  # wakes the build trigger
    on_landed: Callable[[str, float], None] = lambda _pool, _seconds: None  # an announced kernel's image arrived
    clock: Callable[[], float] = time.time
    ahead: dict[str, NodeFinding] = field(default_factory=dict)  # "archive/POOL" -> its next kernel's finding
    error: str | None = None  # why the last read failed (said once per cause)
    read_at: float = 0.0  # when the archive was last read whole (0: never)
    on_read: list[Callable[[], None]] = field(default_factory=list)  # after each read, or failed read
    last: archive_next.Tonight | None = None  # the last reading, per node
    lock: threading.Lock = field(default_factory=threading.Lock)
    _pools: dict[str, tuple[archive_next.PoolNext, NodeFacts]] = field(default_factory=dict)

    def snapshot(self) -> dict[str, NodeFinding]:
        with self.lock:
            return dict(self.ahead)

    def pending(self) -> list[Pending]:
        """Every pool whose next kernel has no image in the ledger yet (the reboot gate's, and the metrics')."""
        out = []
        for key, finding in sorted(self.snapshot().items()):
            if finding.status == Status.PRESENT or not finding.tag or finding.pool is None:
                continue
            buildable = finding.to_do in (Maker.BUILD, Maker.MIRROR)
            why = (finding.why_not_made or finding.reason or "") if not buildable else \
                f"missing from the ledger ({finding.to_do} ahead)"
            out.append(Pending(pool=key.removeprefix(PREFIX), nodes=finding.pool.nodes, kernel=finding.kernel or "",
                               tag=finding.tag,
                               buildable=buildable, why=why))
        return out

    def board(self) -> JSON:
        """Tonight, per pool: what the archive installs next, since when, its image and whether it exists."""
        with self.lock:
            ahead, error = dict(self.ahead), self.error
        pools = []
        for key, f in sorted(ahead.items()):
            a = f.pool.as_dict() if f.pool is not None else {}
            pools.append({"pool": key.removeprefix(PREFIX), "nodes": a.get("nodes"), "running": a.get("running"),
                          "next": f.kernel, "suite": a.get("suite"), "since": a.get("since"), "tag": f.tag,
                          "status": f.status, "action": f.to_do,
                          "reason": f.why_not_made if f.to_do not in (Maker.BUILD, Maker.MIRROR) else None})
        return {"pools": pools, "error": error}

    def poll(self) -> None:
        """Read the archive once; the pools' next kernels whose image the fleet has not yet, handed on."""
        nodes = self.nodes()
        try:
            tonight = archive_next.read(nodes, self.index, self.seen, now=self.clock())
        except (GpualignError, OSError) as err:
            message = err.message if isinstance(err, GpualignError) else f"its cache: {err}"
            with self.lock:
                changed = self.error != message
                self.error = message
            if changed:
                log.error("Debian's archive: %s (the next kernels are not built ahead until it can be read, and the "
                          "reboot gate holds the Debian nodes whose line it has not read)", message)
            for hook in self.on_read:
                hook()
            return
        by_name = {n.name: n for n in nodes}
        # a pool is judged on its first node not yet on its next kernel (NFD's spelling): a node already on it never
        # takes the pool out while another still boots into it; a pool all on it is the nodes' own checks' to judge
        pools = {}
        for pool in tonight.pools:
            behind = [n for n in pool.nodes if pool.next is not None and
                      by_name[n].kernel != Kernel.of(pool.next.release).label]
            if behind:
                pools[PREFIX + pool.name] = (pool, by_name[behind[0]])
        with self.lock:
            self._pools, self.error, self.last, self.read_at = pools, None, tonight, self.clock()
        self.rejudge(read=True)
        for hook in self.on_read:
            hook()

    def reading(self) -> tuple[archive_next.Tonight | None, str | None]:
        """The last reading (per node: the kernel it installs next, or why that is not known), and why the last read
        failed. A reading older than two polls is no reading: the gate holds rather than trust it."""
        with self.lock:
            last, error, at = self.last, self.error, self.read_at
        if last is not None and self.clock() - at > 2 * self.every:
            return None, error or f"not read for {self.clock() - at:.0f}s (more than two polls)"
        return last, error

    def rejudge(self, read: bool = False) -> None:
        """Judge each pool's next kernel against the ledger as it is now (after a poll, or when the ledger changed:
        no archive read)."""
        with self.lock:
            pools = dict(self._pools)
        ahead: dict[str, NodeFinding] = {}
        for key, (pool, facts) in pools.items():
            assert pool.next is not None
            ahead[key] = dataclasses.replace(self.future(facts, Kernel.of(pool.next.release).label),
                                             kernel=pool.next.release, pool=pool)
        now = self.clock()
        with self.lock:
            before, self.ahead = self.ahead, ahead
        changed = ahead.keys() != before.keys() or any(before[k].status != f.status for k, f in ahead.items())
        for key, finding in ahead.items():
            old = before.get(key)
            if read or old is None or old.status != finding.status:
                log.info("Debian's archive installs %s next on %s: image %s %s", finding.kernel,
                         key.removeprefix(PREFIX), finding.tag, finding.status)
            since = pools[key][0].since
            if old is not None and old.kernel == finding.kernel and old.status != Status.PRESENT \
                    and finding.status == Status.PRESENT and since is not None:
                self.on_landed(key.removeprefix(PREFIX), max(0.0, now - since))
        if changed:
            self.on_change()

    def run(self, stop: threading.Event) -> None:
        while True:
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - one bad poll must not stop the schedule
                log.exception("reading Debian's archive")
            if stop.wait(self.every):
                return
