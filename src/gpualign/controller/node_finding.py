"""What the controller found on a node, typed end to end: the audit's own Finding, with what the controller adds to
it. For a node's current kernel, the walk's state and its driver pod's; for a kernel ahead, the kernel and OS it
boots next and, when Debian's archive announced the kernel, the archive's pool. The alarm, the gate, the pull
restarter, the build trigger and the board read its fields; a dict is made only for a page (`as_dict`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpualign.base.json_types import JSON
from gpualign.model.audit import Finding, Status
from gpualign.model.driver_pod_status import DriverPod
from gpualign.usecases.archive_next import PoolNext


@dataclass(frozen=True)
class NodeFinding:
    finding: Finding
    upgrade_state: str | None = None  # nvidia.com/gpu-driver-upgrade-state, as the node says now
    pod_state: str | None = None  # its driver pod's state (Running, ImagePullBackOff, …); None: no pod
    kernel_next: str | None = None  # ahead: the kernel it boots next, as the archive spells it (else the finding's)
    os_next: str | None = None  # ahead: the OS it boots next (gpualign.io/os.next)
    pool: PoolNext | None = None  # ahead: the pool Debian's archive announced the kernel for

    @property
    def name(self) -> str:
        return self.finding.name

    @property
    def status(self) -> Status:
        return self.finding.status

    @property
    def tag(self) -> str | None:
        return self.finding.tag

    @property
    def image(self) -> str | None:
        return self.finding.image

    @property
    def reason(self) -> str:
        return self.finding.reason

    @property
    def kernel(self) -> str | None:
        return self.kernel_next or self.finding.kernel

    @property
    def driver(self) -> str | None:
        return self.finding.driver

    @property
    def driver_pod(self) -> DriverPod | None:
        return self.finding.driver_pod

    @property
    def arch(self) -> str | None:
        return self.finding.arch

    @property
    def modules(self) -> str | None:
        return self.finding.modules

    @property
    def module_type(self) -> str | None:
        return self.finding.module_type

    @property
    def action(self) -> str | None:
        """What is to be done for its image (audit.Finding.to_do): mirror, build, render, none, replace, or None."""
        return self.finding.to_do

    @property
    def action_reason(self) -> str | None:
        return self.finding.why_not_made

    @property
    def missing_tag(self) -> str | None:
        """The tag the node waits for: its image's, when missing from the ledger."""
        return self.finding.tag if self.finding.status == Status.MISSING else None

    def as_dict(self) -> JSON:
        out = self.finding.as_dict()
        if self.kernel_next is not None or self.pool is not None or self.os_next is not None:
            out["kernel"] = self.kernel
            if self.os_next is not None:
                out["os"] = self.os_next
            if self.pool is not None:
                out["archive"] = self.pool.as_dict()
        else:
            out["upgrade_state"], out["pod_state"] = self.upgrade_state, self.pod_state
        return out
