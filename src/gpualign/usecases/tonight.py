"""Tonight, as `status --tonight`, `plan --kernel next` and `why` tell it: the kernel each GPU node boots next (its own
gpualign.io/kernel.next, else what Debian's archive installs next on its line, read through
gpualign.usecases.archive_next), the image it will need there, judged as `plan` judges it (present, wrong, unsigned,
missing, or cannot be made), and from those, per node, whether it may reboot (gpualign.model.reboot_gate). Per pool
too: the kernel the archive names, and each image's state with its build Job."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base import labels as L
from gpualign.ledger.sources import Ledger
from gpualign.model.branches import BranchPolicy
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.facts import NodeFacts
from gpualign.model.ledger import Unsigned
from gpualign.model.makers import Maker
from gpualign.model.needed_images import Change, Needed, NeededImages
from gpualign.model.reboot_gate import ImageVerdict, NextBoot, RebootVerdict, image_of_needed, next_boot, reboot_verdict
from gpualign.model.tags import Rules
from gpualign.usecases.archive_next import PoolNext, Tonight


@dataclass(frozen=True)
class PoolTonight:
    pool: PoolNext
    needed: tuple[Needed, ...]  # the images its nodes will need on the next kernel (one per branch and modules)
    judged: bool  # a ledger was read
    builds: Mapping[str, str]  # tag -> its build Job, in one line

    def image_state(self, n: Needed) -> str:
        """present, wrong, building, missing (to make) or cannot be made; unjudged without a ledger."""
        if not self.judged:
            return "not judged (no ledger read)"
        if n.in_ledger and not n.wrong:
            return "present"
        if not n.wrong and n.action == Maker.NONE:
            return f"cannot be made: {n.making.why}"
        building = self.builds.get(n.tag) or self.builds.get("*")
        unsigned = isinstance(n.wrong, Unsigned)
        state = (f"present but unsigned ({n.wrong})" if unsigned else f"present but wrong ({n.wrong})") if n.wrong \
            else "missing"
        return f"{state}; {building}" if building else f"{state}: {n.action} it before any node reboots into it"

    def as_dict(self) -> dict[str, Any]:
        return {**self.pool.as_dict(), "images": [
            {"tag": n.tag, "nodes": list(n.nodes), "in_ledger": n.in_ledger if self.judged else None,
             "action": n.action, "state": self.image_state(n)} for n in self.needed]}

    def line(self) -> str:
        p, nxt = self.pool, self.pool.next
        head = f"{p.name} ({len(p.nodes)} node{'s' if len(p.nodes) != 1 else ''})"
        if nxt is None:
            return f"{head}: no metapackage of the suites read follows its line"
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(p.since)) if p.since else "now"
        said = f"{head}: {nxt.release} next ({nxt.suite}, first read here {since})"
        if not self.needed:
            return said + "; no image judged (its nodes' branch is not known)"
        return said + "; " + "; ".join(f"{n.tag} {self.image_state(n)}" for n in self.needed)


def boots(nodes: Iterable[NodeFacts], archive: Tonight | None, archive_error: str | None = None) -> dict[str, NextBoot]:
    """node -> the kernel it boots next: its announced one, else the archive's for its line; archive_error: why the
    archive could not be read (its Debian nodes are then on a kernel no judgement covers)."""
    out = {}
    for facts in nodes:
        out[facts.name] = next_boot(
            facts.kernel, facts.labels.get(L.KERNEL_NEXT),
            archive.kernels.get(facts.name) if archive is not None else None,
            (archive.unknown.get(facts.name) if archive is not None else
             f"Debian's archive not read: {archive_error}" if archive_error else None),
            debian=facts.os_id == "debian")
    return out


def change_of(booted: Mapping[str, NextBoot], base: Change | None = None) -> Change:
    """The change that puts every node on the kernel it boots next (a node whose next kernel is unknown stays
    unknown, with why), for gpualign.model.needed_images."""
    return dataclasses.replace(
        base or Change(), kernel=None,
        kernels=tuple(sorted((n, b.kernel) for n, b in booted.items() if b.kernel)),
        unknown=tuple(sorted((n, b.unknown) for n, b in booted.items() if not b.kernel)))


def verdicts(booted: Mapping[str, NextBoot], needed: NeededImages, judged: bool) -> list[RebootVerdict]:
    """Per node, may it reboot tonight (gpualign.model.reboot_gate), from the images plan names for the kernels the
    nodes boot next; judged: a ledger was read (with none, no node may)."""
    by_node = {node: n for n in needed.needed for node in n.nodes}
    unknown = dict(needed.unknown)
    out = []
    for name, boot in sorted(booted.items()):
        n = by_node.get(name)
        image = image_of_needed(n, judged) if n is not None else \
            ImageVerdict.unnamed(unknown.get(name) or "no driver image can be named for it")
        out.append(reboot_verdict(name, boot, image))
    return out


def pools(archive: Tonight, needed: NeededImages, judged: bool, builds: Mapping[str, str]) -> list[PoolTonight]:
    """Each pool the archive was read for, with the images its nodes need on the kernels they boot next."""
    return [PoolTonight(pool, tuple(n for n in needed.needed if set(n.nodes) & set(pool.nodes)), judged, builds)
            for pool in archive.pools]


@dataclass(frozen=True)
class Judged:
    """Tonight, judged: per node whether it may reboot, per pool the archive's kernel and its images' states."""

    nodes: list[RebootVerdict]
    pools: list[PoolTonight]
    needed: NeededImages

    @property
    def held(self) -> list[RebootVerdict]:
        return [v for v in self.nodes if not v.ready]


def judge(archive: Tonight | None, nodes: Sequence[NodeFacts], pods: Mapping[str, DriverPod],
          ledger: Ledger | None, rules: Rules, builds: Mapping[str, str], *, archive_error: str | None = None,
          docker_config: Path | None = None, trusted: tuple[Any, ...] = ()) -> Judged:
    """Each node on the kernel it boots next, its image judged as plan judges it (a present one by its labels,
    modules and signature, where the ledger is a registry); ledger None: nothing judged, every node held."""
    from gpualign.usecases.ledgers import repository_for
    from gpualign.usecases.plan_images import PlanSetup, judged_needs

    booted = boots(nodes, archive, archive_error)
    available = ledger or Ledger(frozenset(), ())
    setup = PlanSetup(change=change_of(booted), available=available,
                      repository=repository_for(None, list(available.sources)), rules=rules,
                      branches=BranchPolicy(), docker_config=docker_config, trusted=trusted)
    needed = judged_needs(nodes, pods, setup)
    judged = ledger is not None
    return Judged(verdicts(booted, needed, judged), pools(archive, needed, judged, builds) if archive else [], needed)
