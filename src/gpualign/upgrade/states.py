"""States, keys and annotations of the GPU Operator's driver upgrade (NVIDIA/k8s-operator-libs pkg/upgrade)."""

from __future__ import annotations

from enum import StrEnum

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
POD_DRAIN_SKIP = "nvidia.com/gpu-driver-upgrade-drain.skip"

INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
WAIT_START = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
VALIDATION_START = "nvidia.com/gpu-driver-upgrade-validation-start-time"
REQUESTED = "nvidia.com/gpu-driver-upgrade-requested"
EVENT_REASON = "GPUDriverUpgrade"

# gpualign's own annotations: why a node is where it is, and since when. A plain GPU Operator cluster lacks them,
# and status/why then say less, but read the same states.
BLOCKER = "gpualign.io/upgrade-blocker"
BLOCKER_KIND = "gpualign.io/upgrade-blocker-kind"  # what kind of thing BLOCKER says (gpualign.upgrade.blockers)
BLOCKED_SINCE = "gpualign.io/upgrade-blocked-since"
STATE_SINCE = "gpualign.io/upgrade-state-since"
TARGET = "gpualign.io/upgrade-target"
# The DeviceTaintRule the walk made in place of a cordon, on a node whose GPUs are DRA devices (upgrade/device_taint.py)
DEVICE_TAINT = "gpualign.io/upgrade-device-taint"
DELETION_START = "gpualign.io/upgrade-pod-deletion-start-time"
RESTART_START = "gpualign.io/upgrade-pod-restart-start-time"


class UpgradeState(StrEnum):
    """The values of STATE_LABEL, as the GPU Operator's upgrade controller writes them (UNKNOWN: no label)."""

    UNKNOWN = ""
    REQUIRED = "upgrade-required"
    CORDON = "cordon-required"
    WAIT_FOR_JOBS = "wait-for-jobs-required"
    POD_DELETION = "pod-deletion-required"
    DRAIN = "drain-required"
    # k8s-operator-libs' requestor mode: a NodeMaintenance (maintenance.nvidia.com/v1alpha1) asks the maintenance
    # operator to cordon and drain the node; when it is Ready the walk goes on at pod-restart-required.
    # post-maintenance-required is the name the libs keep for that step, not yet written by them.
    NODE_MAINTENANCE = "node-maintenance-required"
    POST_MAINTENANCE = "post-maintenance-required"
    POD_RESTART = "pod-restart-required"
    VALIDATION = "validation-required"
    UNCORDON = "uncordon-required"
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"


UNKNOWN = UpgradeState.UNKNOWN
REQUIRED = UpgradeState.REQUIRED
CORDON = UpgradeState.CORDON
WAIT_FOR_JOBS = UpgradeState.WAIT_FOR_JOBS
POD_DELETION = UpgradeState.POD_DELETION
DRAIN = UpgradeState.DRAIN
NODE_MAINTENANCE = UpgradeState.NODE_MAINTENANCE
POST_MAINTENANCE = UpgradeState.POST_MAINTENANCE
POD_RESTART = UpgradeState.POD_RESTART
VALIDATION = UpgradeState.VALIDATION
UNCORDON = UpgradeState.UNCORDON
DONE = UpgradeState.DONE
FAILED = UpgradeState.FAILED

# The walk's order: in requestor mode a node goes from upgrade-required to node-maintenance-required (the maintenance
# operator cordons and drains it, in place of cordon-required .. drain-required), then on at pod-restart-required.
ORDER = (REQUIRED, CORDON, NODE_MAINTENANCE, WAIT_FOR_JOBS, POD_DELETION, DRAIN, POST_MAINTENANCE, POD_RESTART,
         VALIDATION, UNCORDON, DONE)
ALL = (*ORDER, FAILED)
# Nodes in these states hold a parallelism slot (the operator: all − (unknown + done + upgrade-required)).
IN_PROGRESS = frozenset({CORDON, NODE_MAINTENANCE, WAIT_FOR_JOBS, POD_DELETION, DRAIN, POST_MAINTENANCE, POD_RESTART,
                         VALIDATION, UNCORDON, FAILED})
# The states in which the maintenance operator, not the GPU Operator nor gpualign, moves the node's pods.
MAINTENANCE = frozenset({NODE_MAINTENANCE, POST_MAINTENANCE})
# gpualign's annotations, cleared when a node finishes.
OURS = (BLOCKER, BLOCKER_KIND, BLOCKED_SINCE, TARGET, DELETION_START, RESTART_START, WAIT_START, VALIDATION_START)
