"""What the controller does about a node once it is checked: one reaction each, held by the reconciler as a list
(in its order, after the finding is recorded). A new reaction is a class here with `react` and `forget`, and one
line where the controller starts (controller/run.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpualign.controller.gate_writer import GateWriter
from gpualign.controller.node_finding import NodeFinding
from gpualign.controller.publisher import Publisher
from gpualign.controller.pull_restart import PullRestarter
from gpualign.model.facts import NodeFacts


@dataclass(frozen=True)
class Checked:
    """A node just checked: its facts, its finding, and the image the GPU Operator's DaemonSet deploys on it (None:
    no operator here, or none of its DaemonSets runs on the node)."""

    facts: NodeFacts
    finding: NodeFinding
    planned: tuple[str, str] | None = None


class Reaction(Protocol):
    @property
    def leader_only(self) -> bool: ...  # it writes to the cluster: only the replica that holds the Lease reacts

    def react(self, checked: Checked) -> None: ...

    def forget(self, name: str) -> None: ...  # the node is gone, or no longer a GPU node


@dataclass(frozen=True)
class Alarm:
    """The Event, the node's annotations and its metric (controller/publisher.py)."""

    publisher: Publisher
    leader_only: bool = True

    def react(self, checked: Checked) -> None:
        self.publisher.publish(checked.facts, checked.finding)

    def forget(self, name: str) -> None:
        self.publisher.forget(name)


@dataclass(frozen=True)
class Gate:
    """The gate on the GPU Operator's walk (controller/gate_writer.py) while it gates; otherwise every hold it left
    is released."""

    writer: GateWriter
    gating: Callable[[], bool]
    leader_only: bool = True

    def react(self, checked: Checked) -> None:
        if self.gating():
            self.writer.apply(checked.facts, checked.finding, checked.planned)
        else:
            self.writer.release_if_held(checked.facts)

    def forget(self, name: str) -> None:
        return None  # a gone node holds nothing


@dataclass(frozen=True)
class RestartWaiting:
    """A driver pod waiting for an image the ledger now has, restarted (controller/pull_restart.py)."""

    restarter: PullRestarter
    leader_only: bool = True

    def react(self, checked: Checked) -> None:
        self.restarter.apply(checked.facts, checked.finding)

    def forget(self, name: str) -> None:
        self.restarter.forget(name)


@dataclass(frozen=True)
class Rejudge:
    """A judgement made again from the caches by the node's name, by every replica (the reboot gate's verdict):
    after each check, and when the node is gone (it finds it gone)."""

    judge: Callable[[str], None]
    leader_only: bool = False

    def react(self, checked: Checked) -> None:
        self.judge(checked.facts.name)

    def forget(self, name: str) -> None:
        self.judge(name)
