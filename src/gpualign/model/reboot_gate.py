"""May this node reboot tonight? One pure answer per GPU node, given the kernel it boots next and the ledger's verdict
on that kernel's image. The controller's gate, `status --tonight`, `plan --kernel next` and `why` all ask it, so they
never disagree.

The kernel a node boots next is the one it announces (`gpualign.io/kernel.next`, written when a kernel is staged),
else the one Debian's archive installs next on its line, else (a node of no archive gpualign reads, with no label)
the one it runs. A Debian node whose line the archive has not been read for is on a kernel no judgement covers: it
is held. A neighbour already on the next kernel changes nothing: each node is judged on its own.

A node is ready only on a positive judgement: that kernel's image present in the ledger and judged right (labels,
modules, signature). Anything else holds it, with the kind of hold and one sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpualign.model.makers import Maker


class BootSource(StrEnum):
    LABEL = "label"  # the node's own gpualign.io/kernel.next
    ARCHIVE = "archive"  # what Debian's archive installs next on its line
    RUNNING = "running"  # nothing announced: it boots the kernel it runs
    UNKNOWN = "unknown"  # a Debian node whose line was not read: no judgement covers it


class Hold(StrEnum):
    MISSING = "missing"  # the image is not in the ledger (to be mirrored or built)
    CANNOT_BE_MADE = "cannot-be-made"  # not in the ledger, and nobody can make it
    WRONG = "wrong"  # in the ledger under the tag, but built for something else
    UNSIGNED = "unsigned"  # in the ledger, but no trusted key signed it
    UNJUDGED = "unjudged"  # nothing judged it: no next kernel known, no ledger read, its image never checked


@dataclass(frozen=True)
class NextBoot:
    """The kernel a node boots next, where that is known from, and, when it is not known, why."""

    kernel: str | None  # the release (6.1.0-57-amd64), or NFD's spelling: both name one kernel
    source: BootSource
    unknown: str = ""


def next_boot(running: str | None, announced: str | None, archive: str | None, archive_unknown: str | None,
              debian: bool) -> NextBoot:
    """The kernel a node boots next. announced: its gpualign.io/kernel.next; archive: the kernel Debian's archive
    installs next on its line (None when not read or not known, with archive_unknown saying why, when it was asked);
    debian: whether the archive speaks for this node at all."""
    if announced:
        return NextBoot(announced, BootSource.LABEL)
    if archive:
        return NextBoot(archive, BootSource.ARCHIVE)
    if debian:
        return NextBoot(None, BootSource.UNKNOWN,
                        archive_unknown or "Debian's archive has not been read for its kernel line yet")
    if running:
        return NextBoot(running, BootSource.RUNNING)
    return NextBoot(None, BootSource.UNKNOWN, "its kernel is not known (no NFD kernel label)")


@dataclass(frozen=True)
class ImageVerdict:
    """What the ledger says of the image a kernel needs, as check and plan judge it."""

    tag: str | None  # None: no image can be named (why_not says why)
    in_ledger: bool | None = None  # None: no ledger was read
    wrong: str | None = None  # present, but why it is wrong (its labels, modules, signature), or None
    maker: str = Maker.NONE  # who would make it when it is missing (gpualign.model.makers)
    why_not: str = ""  # why no tag, or why nobody can make it

    @classmethod
    def unnamed(cls, why: str) -> ImageVerdict:
        return cls(None, why_not=why)


@dataclass(frozen=True)
class RebootVerdict:
    node: str
    kernel: str | None
    source: BootSource
    tag: str | None
    hold: Hold | None  # None: ready to reboot
    why: str  # one sentence: what holds it, or why it may go

    @property
    def ready(self) -> bool:
        return self.hold is None

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "kernel": self.kernel, "source": str(self.source), "tag": self.tag,
                "ready": self.ready, "hold": str(self.hold) if self.hold else None, "why": self.why}

    def line(self) -> str:
        boots = f"boots {self.kernel} next ({_SAID[self.source]})" if self.kernel else "next kernel unknown"
        verdict = "may reboot" if self.ready else f"held ({self.hold})"
        return f"{self.node}: {boots}: {verdict}: {self.why}"


_SAID = {BootSource.LABEL: "its gpualign.io/kernel.next", BootSource.ARCHIVE: "Debian's archive",
         BootSource.RUNNING: "the kernel it runs; nothing announced another", BootSource.UNKNOWN: "unknown"}


def reboot_verdict(node: str, boot: NextBoot, image: ImageVerdict) -> RebootVerdict:
    """Ready only when the image of the kernel the node boots next is in the ledger and judged right."""
    def held(hold: Hold, why: str) -> RebootVerdict:
        return RebootVerdict(node=node, kernel=boot.kernel, source=boot.source, tag=image.tag, hold=hold, why=why)

    if boot.kernel is None:
        return held(Hold.UNJUDGED, boot.unknown or "the kernel it boots next is not known")
    if image.tag is None:
        return held(Hold.UNJUDGED, image.why_not or "no driver image can be named for it")
    if image.in_ledger is None:
        return held(Hold.UNJUDGED, f"{image.tag} not judged: no ledger was read")
    if not image.in_ledger:
        if image.maker == Maker.NONE:
            return held(Hold.CANNOT_BE_MADE, f"{image.tag} is missing and cannot be made: {image.why_not}")
        return held(Hold.MISSING, f"{image.tag} is missing from the ledger ({image.maker} it before the reboot)")
    if image.wrong:
        kind = _wrong_kind(image.wrong)
        if kind is Hold.UNSIGNED:
            return held(kind, f"{image.tag} is in the ledger but unsigned by a trusted key ({image.wrong})")
        if kind is Hold.UNJUDGED:
            return held(kind, f"{image.tag} is in the ledger but was never judged ({image.wrong})")
        return held(kind, f"{image.tag} is in the ledger but wrong ({image.wrong})")
    return RebootVerdict(node=node, kernel=boot.kernel, source=boot.source, tag=image.tag, hold=None,
                         why=f"{image.tag} is in the ledger and judged right")


def _wrong_kind(why: str) -> Hold:
    """The kind of a present image's fault, by the type its judge gave the reason (gpualign.model.ledger)."""
    from gpualign.model.ledger import Unsigned, Unverified

    if isinstance(why, Unsigned):
        return Hold.UNSIGNED
    return Hold.UNJUDGED if isinstance(why, Unverified) else Hold.WRONG


def image_of_finding(finding: Any) -> ImageVerdict | None:
    """The ledger's verdict as an audit Finding (gpualign.model.audit) carries it; None for a node whose driver the
    host installs (no image is judged there: the host's own tooling rebuilds it)."""
    from gpualign.model.audit import Status

    if finding.status == Status.HOST_MANAGED:
        return None
    if finding.tag is None or finding.status == Status.UNKNOWN:
        return ImageVerdict.unnamed(finding.reason)
    if finding.status == Status.PRESENT:
        return ImageVerdict(finding.tag, True)
    if finding.status == Status.WRONG_IMAGE:
        return ImageVerdict(finding.tag, True, finding.wrong or finding.reason)
    return ImageVerdict(finding.tag, False, maker=finding.action or Maker.NONE, why_not=finding.why_not_made or "")


def image_of_needed(needed: Any, judged: bool) -> ImageVerdict:
    """The ledger's verdict as plan's Needed (gpualign.model.needed_images) carries it; judged: a ledger was read."""
    if not judged:
        return ImageVerdict(needed.tag)
    present = needed.in_ledger or needed.wrong is not None
    return ImageVerdict(needed.tag, present, needed.wrong, maker=needed.action, why_not=needed.making.why)
