"""Before a kernel, OS or branch change: which images would be needed, and which of those the ledger lacks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpualign import labels as L
from gpualign.branches import BranchPolicy
from gpualign.facts import NodeFacts, node_facts
from gpualign.ledger.sources import Ledger
from gpualign.tags import Rules, required_image


@dataclass(frozen=True)
class Change:
    kernel: str | None = None
    os_id: str | None = None
    os_version: str | None = None
    branch: str | None = None


@dataclass(frozen=True)
class Needed:
    tag: str
    branch: str
    kernel: str
    os_tag: str
    published: bool
    in_ledger: bool
    nodes: tuple[str, ...]

    def build_args(self) -> dict[str, str]:
        return {"DRIVER_BRANCH": self.branch, "KERNEL_VERSION": self.kernel, "OS_TAG": self.os_tag,
                "tag": self.tag}


@dataclass(frozen=True)
class Plan:
    needed: tuple[Needed, ...]
    unknown: tuple[tuple[str, str], ...]  # (node, reason)

    @property
    def to_build(self) -> tuple[Needed, ...]:
        return tuple(n for n in self.needed if not n.in_ledger)

    def as_dict(self) -> dict[str, Any]:
        return {"needed": [dataclasses.asdict(n) for n in self.needed],
                "to_build": [n.tag for n in self.to_build],
                "unknown": [{"node": n, "reason": r} for n, r in self.unknown]}


def plan(nodes: Iterable[NodeFacts], change: Change, ledger: Ledger, rules: Rules, policy: BranchPolicy) -> Plan:
    groups: dict[str, list[str]] = {}
    info: dict[str, tuple[str, str, str, bool]] = {}
    unknown: list[tuple[str, str]] = []
    for facts in sorted(nodes, key=lambda n: n.name):
        # The node as it will be: its labels with the change applied, read by the same code as today's.
        labels = dict(facts.labels)
        if change.kernel:
            labels[L.KERNEL] = change.kernel
        if change.os_id and change.os_version:
            labels[L.OS_ID], labels[L.OS_VERSION] = change.os_id, change.os_version
        for key in (L.DRIVER_CURRENT_FULL, *L.DRIVER_CURRENT.values(), *L.DRIVER_LEGACY.values()):
            labels.pop(key, None)  # the loaded driver is about to change: its labels say nothing of the new image
        changed = node_facts({"metadata": {"name": facts.name, "labels": labels}})
        branch = change.branch or policy.branch_for(facts.labels) or (facts.driver.branch if facts.driver else None)
        req = required_image(changed, branch, rules)
        if req.tag is None:
            unknown.append((facts.name, req.reason))
            continue
        groups.setdefault(req.tag, []).append(facts.name)
        info[req.tag] = (req.branch or "", req.kernel or "", req.os_tag or "", req.published)
    needed = tuple(Needed(tag, *info[tag][:3], info[tag][3], ledger.has(tag), tuple(names))
                   for tag, names in sorted(groups.items()))
    return Plan(needed, tuple(unknown))
