"""The alarm's writer: the node's annotations (the alarm's memory) and, on a transition, an Event. Only the leader
publishes; what to write is decided by `alarm.decide`.

A write whose answer is lost (a reset connection) is retried: the annotation is idempotent, and the Event is named
by the transition's sequence number, so the retry finds it if it was made, and makes it if it was not. Nothing is
lost, nothing doubled."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpualign.base.errors import GpualignError
from gpualign.controller import alarm
from gpualign.kube.client import Kube
from gpualign.model.audit import Finding
from gpualign.model.facts import NodeFacts

log = logging.getLogger("gpualign.controller")


@dataclass
class Publisher:
    kube: Kube
    retry: Callable[[str], None]  # check this node again: the alarm must not be lost
    published: dict[str, alarm.Said] = field(default_factory=dict)  # node -> what this process last wrote
    # node -> the transition written (status, tag, sequence) whose Event is not confirmed yet (a write failed)
    unconfirmed: dict[str, tuple[str | None, str | None, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, facts: NodeFacts, finding: Finding) -> None:
        with self.lock:
            last, pending = self.published.get(facts.name), self.unconfirmed.get(facts.name)
        transition = alarm.decide(finding, facts.annotations, last, pending)
        if transition is None:
            return
        try:
            if transition.resuming:
                # The annotation landed (its answer may have been lost); its Event may not have.
                node_obj = self.kube.get(f"/api/v1/nodes/{facts.name}")
                if node_obj is None:
                    with self.lock:
                        self.unconfirmed.pop(facts.name, None)
                    return
            else:
                with self.lock:
                    self.unconfirmed[facts.name] = (transition.status, transition.tag, transition.sequence)
                node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}",
                                           {"metadata": {"annotations": transition.annotations()}})
            told = alarm.event(transition, finding)
            if told is not None:
                self.kube.event(node_obj, told.reason, told.message, warning=told.warning,
                                name=alarm.event_name(facts.name, transition.sequence))
            with self.lock:
                self.published[facts.name] = (transition.status, transition.tag)
                self.unconfirmed.pop(facts.name, None)
        except GpualignError as err:
            log.warning("node %s: %s", facts.name, err.message)
            self.retry(facts.name)

    def forget(self, name: str) -> None:
        with self.lock:
            self.published.pop(name, None)
            self.unconfirmed.pop(name, None)
