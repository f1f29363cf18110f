"""Debian's archive as the announcement (`gpualign controller --build --build-ahead-from-archive`): on a schedule,
the kernel the archive will install next on each pool the fleet runs (gpualign.usecases.archive_next, through the
verified door), judged as the pool's nodes would be on it, and handed to the build trigger as an image to build
ahead, before any node installs it. A node waiting now always goes first (the trigger's order); a kernel that cannot
be built makes no Job, only the trigger's refusal Event, on the pool's nodes.

A poll costs each suite's InRelease asked with If-Modified-Since, and a Packages index only when the suite changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpualign.base.errors import GpualignError
from gpualign.model.facts import NodeFacts
from gpualign.model.kernels import label_of
from gpualign.usecases import archive_next

log = logging.getLogger("gpualign.controller")
JSON = dict[str, Any]
PREFIX = "archive/"  # the trigger's key of a pool the archive announces for (no node is named so: "/" is not in one)


@dataclass
class ArchiveWatch:
    nodes: Callable[[], list[NodeFacts]]  # the fleet's GPU nodes (the controller's cache)
    future: Callable[[NodeFacts, str], JSON]  # a node's finding on another kernel (its label)
    index: archive_next.Indexes
    seen: Path | None = None  # first sightings, kept across restarts where the cache is kept
    every: float = 900.0
    on_change: Callable[[], None] = lambda: None  # wakes the build trigger
    ahead: dict[str, JSON] = field(default_factory=dict)  # "archive/POOL" -> its next kernel's finding
    error: str | None = None  # why the last read failed (said once per cause)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> dict[str, JSON]:
        with self.lock:
            return dict(self.ahead)

    def poll(self) -> None:
        """Read the archive once; the pools' next kernels whose image the fleet has not yet, handed on."""
        nodes = self.nodes()
        try:
            tonight = archive_next.read(nodes, self.index, self.seen)
        except (GpualignError, OSError) as err:
            message = err.message if isinstance(err, GpualignError) else f"its cache: {err}"
            with self.lock:
                changed = self.error != message
                self.error = message
            if changed:
                log.error("Debian's archive: %s (the next kernels are not built ahead until it can be read)",
                          message)
            return
        by_name = {n.name: n for n in nodes}
        ahead: dict[str, JSON] = {}
        for pool in tonight.pools:
            nxt = pool.next
            if nxt is None or label_of(nxt.release) in pool.running:  # the pool runs it already (NFD's spelling)
                continue
            facts = by_name[pool.nodes[0]]
            finding = self.future(facts, label_of(nxt.release))
            finding.update({"archive": pool.as_dict(), "kernel": nxt.release})
            ahead[PREFIX + pool.name] = finding
        with self.lock:
            changed = ahead.keys() != self.ahead.keys() or any(
                self.ahead[k].get("status") != f.get("status") for k, f in ahead.items())
            self.ahead, self.error = ahead, None
        for key, finding in ahead.items():
            log.info("Debian's archive installs %s next on %s: image %s %s", finding["kernel"],
                     key.removeprefix(PREFIX), finding.get("tag"), finding.get("status"))
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
