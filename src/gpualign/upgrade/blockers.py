"""What kind of thing holds a node's driver upgrade: a small, fixed set, for the code to branch on, a metric's label
and an alert's grouping. The full sentence (which PDB, which image, its numbers) changes as the cluster does, so it
is for people: the node's gpualign.io/upgrade-blocker annotation, `status` and `why`; a label carrying it would be a
new series each time a number moved, and an alert grouped by it would resolve and fire again.

The walk decides the kind with the hold (gpualign.upgrade.planner's actions, the executor's blocks) and writes it
beside the sentence, in gpualign.io/upgrade-blocker-kind. Pure."""

from __future__ import annotations

from enum import StrEnum

PDB_WORDS = "waiting before cordon"  # a PDB hold's sentence starts so (gpualign.upgrade.planner writes it)


class BlockKind(StrEnum):
    PDB = "pdb"  # a PodDisruptionBudget allows no disruption now (held before cordon)
    UNMOVABLE = "unmovable"  # a pod kubectl drain would not evict (held before cordon)
    SKIPPED = "skipped"  # the node carries the operator's skip label
    MAINTENANCE = "maintenance"  # a NodeMaintenance holds it (the maintenance operator's requestor mode)
    WAITING_FOR_SLOT = "waiting-for-slot"  # maxParallelUpgrades or maxUnavailable is reached
    FAILED = "failed"  # upgrade-failed
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
    (PDB_WORDS, BlockKind.PDB),
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


# The walk says these on the node (annotation, Event, terminal) as they happen; the others are only planned.
TOLD = frozenset({BlockKind.IMAGE_MISSING, BlockKind.IMAGE_WRONG, BlockKind.IMAGE_UNVERIFIED, BlockKind.SKIPPED,
                  BlockKind.PDB, BlockKind.UNMOVABLE})
BEFORE_CORDON = frozenset({BlockKind.PDB, BlockKind.UNMOVABLE})  # held with the node still schedulable


def kind_of(blocker: str, written: str | None = None) -> BlockKind:
    """The kind of a node's blocker: the one the walk wrote beside it (`written`, gpualign.io/upgrade-blocker-kind);
    for a blocker written by a gpualign that wrote no kind, read from its first words, as that gpualign wrote
    them."""
    if written:
        try:
            return BlockKind(written)
        except ValueError:
            pass
    text = blocker.strip()
    for prefix, kind in _PREFIXES:
        if text.startswith(prefix):
            return kind
    if "timed out" in text:
        return BlockKind.TIMEOUT
    if "evict" in text:
        return BlockKind.EVICTION
    return BlockKind.OTHER


def detail(blocker: str, kind: BlockKind) -> str:
    """The blocker's sentence without the words its kind already says, for a line that says them its own way: a PDB
    hold's "waiting before cordon: " (the planner writes them first, on the node, for kubectl's readers). This reads
    the node's annotation back, as kind_of does, and only here."""
    lead = f"{PDB_WORDS}: "
    return blocker[len(lead):] if kind == BlockKind.PDB and blocker.startswith(lead) else blocker
