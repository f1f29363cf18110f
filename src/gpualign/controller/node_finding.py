"""What the controller found on a node, typed end to end: the audit's own Finding, with what the controller adds to
it. For a node's current kernel, the walk's state and its driver pod's; for a kernel ahead, the OS it boots next and,
when Debian's archive announced the kernel, the archive's pool (its `kernel` is then the one it boots next, as the
archive spells it). The alarm, the gate, the pull restarter, the build trigger and the board read its fields; a dict
is made only for a page (`as_dict`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpualign.base.json_types import JSON
from gpualign.model.audit import Finding, Status
from gpualign.usecases.archive_next import PoolNext


@dataclass
class NodeFinding(Finding):
    upgrade_state: str | None = None  # nvidia.com/gpu-driver-upgrade-state, as the node says now
    pod_state: str | None = None  # its driver pod's state (Running, ImagePullBackOff, …); None: no pod
    os_next: str | None = None  # ahead: the OS it boots next (gpualign.io/os.next)
    pool: PoolNext | None = None  # ahead: the pool Debian's archive announced the kernel for

    @classmethod
    def of(cls, finding: Finding, **more: object) -> NodeFinding:
        return cls(**finding.__dict__, **more)  # type: ignore[arg-type]

    @property
    def missing_tag(self) -> str | None:
        """The tag the node waits for: its image's, when missing from the ledger."""
        return self.tag if self.status == Status.MISSING else None

    def as_dict(self) -> JSON:
        out = super().as_dict()
        pool, os_next = out.pop("pool"), out.pop("os_next")
        if pool is not None or os_next is not None:  # a kernel ahead: what its node boots next
            del out["upgrade_state"], out["pod_state"]
            if os_next is not None:
                out["os"] = os_next
            if pool is not None:
                out["archive"] = self.pool.as_dict() if self.pool else None
        return out
