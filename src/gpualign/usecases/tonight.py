"""Tonight, as `status --tonight` tells it: per Debian pool, the kernel the archive will install next (read through
gpualign.usecases.archive_next), the image its nodes will need on it, and whether that image is in the ledger, is
being built (the controller's build Jobs), or cannot be made, and why.

The image is judged as `plan --kernel next` judges it (gpualign.model.needed_images), so the two never disagree."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpualign.ledger.sources import Ledger
from gpualign.model.audit import DriverPod
from gpualign.model.branches import BranchPolicy
from gpualign.model.facts import NodeFacts
from gpualign.model.makers import Maker
from gpualign.model.needed_images import Change, Needed, images_needed
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
            return "not judged (no --ledger)"
        if n.in_ledger and not n.wrong:
            return "present"
        if n.action == Maker.NONE:
            return f"cannot be made: {n.making.why}"
        building = self.builds.get(n.tag) or self.builds.get("*")
        state = f"present but wrong ({n.wrong})" if n.wrong else "missing"
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
        said = f"{head}: {nxt.release} next ({nxt.suite}, named since {since})"
        if not self.needed:
            return said + "; no image judged (its nodes' branch is not known)"
        return said + "; " + "; ".join(f"{n.tag} {self.image_state(n)}" for n in self.needed)


def judge(tonight: Tonight, nodes: Iterable[NodeFacts], pods: Mapping[str, DriverPod], ledger: Ledger | None,
          rules: Rules, builds: Mapping[str, str]) -> list[PoolTonight]:
    """Each pool's next kernel with the images it needs; nodes keep the branch their driver pods run."""
    change = Change(kernels=tuple(sorted(tonight.kernels.items())), unknown=tuple(sorted(tonight.unknown.items())))
    judged = ledger is not None
    needed = images_needed(list(nodes), change, ledger or Ledger(frozenset(), ()), rules, BranchPolicy(), pods=pods)
    return [PoolTonight(pool, tuple(n for n in needed.needed if set(n.nodes) & set(pool.nodes)), judged, builds)
            for pool in tonight.pools]
