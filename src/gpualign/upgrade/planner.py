"""The pure planner: a snapshot of the target nodes + the policy → what to do next, node by node.

It decides admission (who may start, within maxParallelUpgrades and maxUnavailable, and never without the image)
and the uncordon rule (only nodes gpualign itself cordoned). The per-state work is the executor's; the planner
only says which state handler runs on which node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpualign.upgrade import states as S
from gpualign.upgrade.policy import UpgradePolicy


@dataclass(frozen=True)
class NodeView:
    """What the planner needs to know of one node; built from labels, annotations and its driver pod."""

    name: str
    state: str
    unschedulable: bool
    ready: bool = True
    skip: bool = False
    initial_unschedulable: str | None = None  # the operator's annotation: "true" / "false" / absent
    needs_upgrade: bool = True  # its driver pod is not the target
    image_present: bool = True
    target_tag: str | None = None

    @property
    def unavailable(self) -> bool:
        return self.unschedulable or not self.ready


@dataclass(frozen=True)
class Action:
    node: str
    kind: str  # mark-required | start | hold | handle | uncordon | finish | mark-done
    reason: str = ""


def _holds_slot(n: NodeView, policy: UpgradePolicy) -> bool:
    if n.state == S.FAILED:
        return policy.failed_nodes_hold_slots
    return n.state in S.IN_PROGRESS


def plan(nodes: Iterable[NodeView], policy: UpgradePolicy) -> list[Action]:
    views = sorted(nodes, key=lambda n: n.name)
    actions: list[Action] = []
    in_progress = sum(1 for n in views if _holds_slot(n, policy))
    unavailable = sum(1 for n in views if n.unavailable)
    max_unavailable = policy.max_unavailable_nodes(len(views))
    max_parallel = policy.max_parallel_upgrades or len(views) or 1

    for n in views:
        if n.skip and n.state in (S.UNKNOWN, S.DONE, S.REQUIRED):
            actions.append(Action(n.name, "hold", f"skipped: {S.SKIP_LABEL}=true"))
            continue
        if n.state in (S.UNKNOWN, S.DONE):
            if n.needs_upgrade:
                actions.append(Action(n.name, "mark-required"))
            elif n.state == S.UNKNOWN:
                actions.append(Action(n.name, "mark-done", "driver already the target"))
            continue
        if n.state == S.REQUIRED:
            if not n.needs_upgrade:
                actions.append(Action(n.name, "mark-done", "driver already the target"))
            elif not n.image_present:
                actions.append(Action(n.name, "hold", f"image missing: {n.target_tag}"))
            elif in_progress >= max_parallel:
                actions.append(Action(n.name, "hold",
                                      f"waiting for a slot: {in_progress} of maxParallelUpgrades={max_parallel} "
                                      "in progress"))
            elif not n.unavailable and unavailable >= max_unavailable:
                actions.append(Action(n.name, "hold",
                                      f"waiting for availability: {unavailable} of maxUnavailable="
                                      f"{max_unavailable} nodes unavailable"))
            else:
                actions.append(Action(n.name, "start"))
                in_progress += 1
                if not n.unavailable:
                    unavailable += 1
            continue
        if n.state == S.UNCORDON:
            if n.initial_unschedulable == "false":
                actions.append(Action(n.name, "uncordon"))
            else:
                actions.append(Action(n.name, "finish", "was cordoned before the upgrade: left cordoned"))
            continue
        if n.state == S.FAILED:
            actions.append(Action(n.name, "hold", "upgrade-failed: fix the cause, then relabel it upgrade-required"))
            continue
        actions.append(Action(n.name, "handle"))
    return actions
