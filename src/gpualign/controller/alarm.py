"""The alarm, decided: a node's finding and what its annotations (or this process) last said, in; the transition to
write, with its Event, out. Pure: the publisher writes what this decides.

Only a missing image, an image in the ledger but wrong, or an operator deploying a mismatched one is an alarm. A
healthy node carries no annotation, so a 5,000-node fleet costs no writes at start-up. The node's annotation is the
alarm's memory: a restarted (or newly elected) controller neither loses nor repeats an Event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from gpualign.model.audit import Finding, Status

IMAGE_ANNOTATION = "gpualign.io/driver-image"
STATUS_ANNOTATION = "gpualign.io/driver-image-status"
# How many alarm transitions (alarmed, cleared) were written on the node: it names each transition's Event, so a
# retried Event (after an answer lost to a reset) is the same object and is refused as a duplicate, never posted twice.
SEQUENCE_ANNOTATION = "gpualign.io/driver-image-transitions"
EVENT_MISSING = "DriverImageMissing"
EVENT_PRESENT = "DriverImageAvailable"
EVENT_MISMATCH = "DriverImageMismatch"  # the GPU Operator deploys an image built for another OS or kernel
EVENT_WRONG = "DriverImageWrong"  # in the ledger under the tag, but its labels name another kernel or branch
ALARMS = (Status.MISSING, Status.OPERATOR_MISMATCH, Status.WRONG_IMAGE)

Said = tuple[str | None, str | None]  # (alarm status or None, its tag or None): what a node's annotations say


@dataclass(frozen=True)
class Transition:
    status: str | None  # the alarm now (None: cleared)
    tag: str | None
    sequence: int  # names the transition's Event
    was_alarmed: bool  # the node carried an alarm before: clearing it is told
    resuming: bool  # written already (its answer lost): only its Event may be missing

    def annotations(self) -> dict[str, str | None]:
        return {IMAGE_ANNOTATION: self.tag, STATUS_ANNOTATION: self.status, SEQUENCE_ANNOTATION: str(self.sequence)}


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = True


def said(annotations: Mapping[str, str]) -> Said:
    return annotations.get(STATUS_ANNOTATION), annotations.get(IMAGE_ANNOTATION)


def decide(finding: Finding, annotations: Mapping[str, str], last: Said | None,
           unconfirmed: tuple[str | None, str | None, int] | None) -> Transition | None:
    """The transition to write for this finding, or None when the node already says it.
    last: what this process last wrote on the node (None: what its annotations say).
    unconfirmed: a transition written whose Event is not confirmed yet (a write that failed)."""
    status = finding.status if finding.status in ALARMS else None
    tag = finding.tag if status else None
    last = last or said(annotations)
    resuming = unconfirmed is not None and unconfirmed[:2] == (status, tag) and last == (status, tag)
    if last == (status, tag) and not resuming:
        return None
    if resuming:
        assert unconfirmed is not None
        return Transition(status, tag, unconfirmed[2], status is None, resuming=True)
    return Transition(status, tag, _sequence(annotations) + 1, last[0] in ALARMS, resuming=False)


def event(transition: Transition, finding: Finding) -> Event | None:
    """The Event that tells this transition, or None (a clear that follows no alarm)."""
    if transition.status == Status.MISSING:
        return Event(EVENT_MISSING, f"driver image {finding.image} is missing from the ledger: this node's driver "
                     f"pod cannot pull it and the node loses its GPUs ({finding.reason})")
    if transition.status == Status.WRONG_IMAGE:
        return Event(EVENT_WRONG, f"driver image {finding.image} is in the ledger but {finding.reason}: a "
                     f"driver pod that pulls it crash-loops (repair: gpualign ensure {finding.tag} --replace-wrong)")
    if transition.status == Status.OPERATOR_MISMATCH:
        return Event(EVENT_MISMATCH, f"the GPU Operator deploys {finding.operator_image} here, built for another "
                     f"OS or kernel: {finding.reason}")
    if transition.was_alarmed:
        return Event(EVENT_PRESENT, f"driver image {finding.image} is in the ledger and is what the operator "
                     "deploys", warning=False)
    return None


def event_name(node: str, sequence: int) -> str:
    """node.gpualign-<sequence>, shortened with a hash when the node's name is near the 253-character limit."""
    suffix = f".gpualign-{sequence}"
    if len(node) + len(suffix) <= 253:
        return node + suffix
    return f"{node[:200]}.{hashlib.sha256(node.encode()).hexdigest()[:16]}{suffix}"


def _sequence(annotations: Mapping[str, str]) -> int:
    value = annotations.get(SEQUENCE_ANNOTATION, "0")
    return int(value) if value.isdigit() else 0
