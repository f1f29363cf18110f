"""Before a kernel, OS or branch change: which images would be needed, and which of those the ledger lacks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpualign.branches import BranchPolicy
from gpualign.facts import NodeFacts
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
        changed = dataclasses.replace(
            facts,
            kernel=change.kernel or facts.kernel,
            os_id=change.os_id or facts.os_id,
            os_version=change.os_version or facts.os_version,
            problems=tuple(p for p in facts.problems
                           if not (change.kernel and "kernel" in p)
                           and not (change.os_id and "os" in p.lower()) and "driver label" not in p),
        )
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
