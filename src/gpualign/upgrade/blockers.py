"""What kind of thing holds a node's driver upgrade: a small, fixed set, for a metric's label and an alert's
grouping. The full sentence (which PDB, which image, its numbers) changes as the cluster does, so it stays in the
node's gpualign.io/upgrade-blocker annotation, `status` and `why`; a label carrying it would be a new series each
time a number moved, and an alert grouped by it would resolve and fire again. Pure."""

from __future__ import annotations

from enum import StrEnum


class BlockKind(StrEnum):
    PDB = "pdb"  # a PodDisruptionBudget allows no disruption now (held before cordon)
    IMAGE_MISSING = "image-missing"  # the target image is not in the ledger
    IMAGE_WRONG = "image-wrong"  # it is there, but fails the check
    IMAGE_UNVERIFIED = "image-unverified"  # its modules could not be checked
    WAITING_FOR_JOBS = "waiting-for-jobs"  # waitForCompletion's pods still run
    EVICTION = "eviction"  # an eviction was refused or timed out
    DRIVER_POD = "driver-pod"  # no driver DaemonSet, or no new driver pod
    VALIDATION = "validation"  # the new driver did not validate
    TIMEOUT = "timeout"
    OTHER = "other"


_PREFIXES = (
    ("waiting before cordon", BlockKind.PDB),
    ("image missing", BlockKind.IMAGE_MISSING),
    ("image present but wrong", BlockKind.IMAGE_WRONG),
    ("image not verified", BlockKind.IMAGE_UNVERIFIED),
    ("waiting for ", BlockKind.WAITING_FOR_JOBS),
    ("eviction", BlockKind.EVICTION),
    ("no driver DaemonSet", BlockKind.DRIVER_POD),
    ("no new driver pod", BlockKind.DRIVER_POD),
    ("validating", BlockKind.VALIDATION),
    ("validation", BlockKind.VALIDATION),
    ("gated", BlockKind.IMAGE_MISSING),  # the gate holds a node whose target image is missing
)


def kind_of(blocker: str) -> BlockKind:
    """The kind of a blocker sentence as the walk writes it (upgrade/planner.py, upgrade/executor.py)."""
    text = blocker.strip()
    for prefix, kind in _PREFIXES:
        if text.startswith(prefix):
            return kind
    if "timed out" in text:
        return BlockKind.TIMEOUT
    if "evict" in text:
        return BlockKind.EVICTION
    return BlockKind.OTHER
