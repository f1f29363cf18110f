"""What the controller last found on each node: its current kernel's finding and its next kernel's (built ahead).
Listeners given at construction hear when a node begins, or stops, waiting for a missing tag (the metrics, and the
build trigger's wake-up)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpualign.controller.node_finding import NodeFinding

# (node, the tag it waited for before or None, the tag it waits for now or None)
OnMissing = Callable[[str, str | None, str | None], None]


@dataclass
class Findings:
    on_missing: Sequence[OnMissing] = ()  # its current kernel's tag
    on_ahead_missing: Sequence[OnMissing] = ()  # its next kernel's or OS's (gpualign.io/kernel.next, os.next)
    current: dict[str, NodeFinding] = field(default_factory=dict)
    ahead: dict[str, NodeFinding] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, node: str, finding: NodeFinding) -> None:
        with self.lock:
            old = self.current.get(node)
            self.current[node] = finding
        _tell(self.on_missing, node, old, finding)

    def record_ahead(self, node: str, finding: NodeFinding | None) -> None:
        with self.lock:
            old = self.ahead.pop(node, None)
            if finding is not None:
                self.ahead[node] = finding
        _tell(self.on_ahead_missing, node, old, finding)

    def forget(self, node: str) -> None:
        with self.lock:
            old, old_ahead = self.current.pop(node, None), self.ahead.pop(node, None)
        _tell(self.on_missing, node, old, None)
        _tell(self.on_ahead_missing, node, old_ahead, None)

    def snapshot(self) -> dict[str, NodeFinding]:
        with self.lock:
            return dict(self.current)

    def ahead_snapshot(self) -> dict[str, NodeFinding]:
        with self.lock:
            return dict(self.ahead)


def _tell(listeners: Sequence[OnMissing], node: str, old: NodeFinding | None, new: NodeFinding | None) -> None:
    before, now = old.missing_tag if old else None, new.missing_tag if new else None
    if before != now:
        for listener in listeners:
            listener(node, before, now)
