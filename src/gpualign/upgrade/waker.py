"""Wake the walk as soon as something it waits on changes, instead of on a fixed beat alone.

The walk still reads the whole state each pass (so correctness never rests on an event), but between passes it
sleeps until one of these watches sees a change that can let a node move, or the fallback interval ends:
- the target nodes (metadata only): a label other than the upgrade state changed on a node in the walk — GFD's
  driver labels after a driver load, for one;
- the driver pods (label selector): a driver pod on a node in the walk appeared, changed or went;
- the pods of each node that is waiting for its jobs or its evictions (field selector spec.nodeName, metadata only,
  at most one watch per node in the walk): one of them finished or went.
Passes never come closer than MIN_GAP, however busy the watches are, so a burst of pod deletions costs a few
passes, not one per pod.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from gpualign.base.json_types import JSON
from gpualign.kube.client import Kube
from gpualign.kube.watch import Watcher
from gpualign.upgrade import states as S
from gpualign.upgrade.snapshot import DRIVER_SELECTOR, target_selector

MIN_GAP = 0.2
POD_WATCH_STATES = {S.WAIT_FOR_JOBS, S.POD_DELETION, S.DRAIN}
log = logging.getLogger("gpualign.upgrade.waker")
log.addHandler(logging.NullHandler())  # the walk reports outages itself; a watch's retries are not news
log.propagate = False


class Waker:
    def __init__(self, kube: Kube, selector: str | None) -> None:
        self.kube = kube
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._walking: dict[str, str] = {}  # node -> state, for nodes in the walk
        self._labels: dict[str, tuple[tuple[str, str], ...]] = {}
        self._pod_watches: dict[str, threading.Event] = {}
        self._last_pass = 0.0
        self._watchers = [
            Watcher(kube, "/api/v1/nodes", label_selector=target_selector(selector), metadata_only=True,
                    on_sync=lambda _items: None, on_event=self._node_event, stop=self._stop, name="waker-nodes",
                    logger=log),
            Watcher(kube, "/api/v1/pods", label_selector=DRIVER_SELECTOR, metadata_only=False,
                    on_sync=lambda _items: None, on_event=self._driver_event, stop=self._stop,
                    name="waker-driver-pods", logger=log),
        ]

    def start(self) -> Waker:
        for w in self._watchers:
            w.start()
        return self

    # -- what the walk calls ----------------------------------------------------------------------------------
    def follow(self, states: dict[str, str]) -> None:
        """The nodes in the walk now, with their states; pod watches follow the nodes that wait on pods."""
        self._walking = dict(states)
        wanted = {n for n, s in states.items() if s in POD_WATCH_STATES}
        for node in set(self._pod_watches) - wanted:
            self._pod_watches.pop(node).set()
        for node in wanted - set(self._pod_watches):
            stop = threading.Event()
            self._pod_watches[node] = stop
            Watcher(self.kube, "/api/v1/pods", label_selector=None, field_selector=f"spec.nodeName={node}",
                    metadata_only=True, on_sync=lambda _items: None,
                    on_event=functools.partial(self._pod_event, node), stop=stop,
                    name=f"waker-pods-{node}", logger=log, timeout_seconds=15).start()

    def wait(self, fallback: float) -> None:
        """Until a relevant change (but at least MIN_GAP after the last pass began) or fallback seconds."""
        self._poke.wait(fallback)
        self._poke.clear()  # what arrives from here on belongs to the next pass's wait
        gap = MIN_GAP - (time.monotonic() - self._last_pass)
        if gap > 0:
            time.sleep(gap)
        self._last_pass = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        for stop in self._pod_watches.values():
            stop.set()

    # -- the watches ------------------------------------------------------------------------------------------
    def _node_event(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        labels = tuple(sorted((k, v) for k, v in (meta.get("labels") or {}).items() if k != S.STATE_LABEL))
        changed = self._labels.get(name) != labels
        self._labels[name] = labels
        if name in self._walking and (changed or kind == "DELETED"):
            self._poke.set()

    def _driver_event(self, _kind: str, obj: JSON) -> None:
        if (obj.get("spec") or {}).get("nodeName") in self._walking:
            self._poke.set()

    def _pod_event(self, node: str, kind: str, _obj: JSON) -> None:
        state = self._walking.get(node)
        if kind == "DELETED" and state in POD_WATCH_STATES or kind == "MODIFIED" and state == S.WAIT_FOR_JOBS:
            self._poke.set()
