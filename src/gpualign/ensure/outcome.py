"""What one tag's run reports, as types. Each stage emits events as it goes (`Emit`); the tag's `Outcome` is their
fold (`outcome_of`), made once the run ends. The sentences for people go through `say`, beside them: nothing reads a
sentence back.

An event is a fact the run learnt: a step's seconds, where the modules came from, what happened with the registry's
shared modules, the kernel's checks, the digest the ledger answers after a push, a signature. The fold is pure, so
the record of a run is whatever its events say, and a test can hold a stage to the events it emits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpualign.model.attestations import Evidence


class TagAction(StrEnum):
    """What ensure does for a tag (its plan's and outcome's `action`)."""

    PRESENT = "present"  # in the ledger, and it passes the check: nothing to do
    MIRROR = "mirror"
    BUILD = "build"
    WRONG = "wrong"  # in the ledger under the tag, but it fails the check: reported, replaced only with replace_wrong


class ModuleOrigin(StrEnum):
    """Where a build's modules came from."""

    GIVEN = "given"  # --modules-from
    COMPILED = "compiled"
    CACHE = "cache"  # compiled here before
    SHARED = "shared"  # pulled from the registry's shared modules (another build compiled them)


class SharedState(StrEnum):
    """What happened with the registry's shared modules."""

    PULLED = "pulled"
    PUSHED = "pushed"
    REFUSED = "refused"  # by their artifact's checks, the registry, or the kernel's checks: compiled instead
    NOT_PUSHED = "not pushed"  # the registry refused the push: later builds compile them again


@dataclass(frozen=True)
class Timed:
    step: str  # headers, compile, compile_cpu, shared_pull, userspace_pull, sign, verify, shared_push, image, push,
    seconds: float  # mirror, attest


@dataclass(frozen=True)
class ModulesTaken:
    origin: ModuleOrigin


@dataclass(frozen=True)
class Shared:
    state: SharedState
    why: str = ""  # a refusal's reason, in one line

    def __str__(self) -> str:
        return f"{self.state}: {self.why}" if self.why else str(self.state)


@dataclass(frozen=True)
class FetchedAhead:
    what: str  # modules | userspace (ensure.ahead)


@dataclass(frozen=True)
class Verified:
    record: dict[str, Any]  # the kernel's checks (Verification.as_dict)


@dataclass(frozen=True)
class MadeFrom:
    evidence: Evidence  # what the image is made of, for its SBOM and provenance


@dataclass(frozen=True)
class Pushed:
    digest: str  # what the ledger answers for the tag after the push or the mirror


@dataclass(frozen=True)
class FoundMeanwhile:
    digest: str | None  # another run made the tag while this one waited for its locks


@dataclass(frozen=True)
class Signed:
    where: str  # the cosign signature's tag


@dataclass(frozen=True)
class Attested:
    tags: tuple[str, ...]  # the signed SBOM and provenance's tag, and the attached SBOM's


@dataclass(frozen=True)
class KernelLoaded:
    record: dict[str, Any]  # the kernel's verdict on the modules, booted (gpualign.judging.kernel_console)


@dataclass(frozen=True)
class LedgerUnasked:
    why: str  # a dry run could not ask the ledger whether it holds the tag (offline, unreachable)


Event = (Timed | ModulesTaken | Shared | FetchedAhead | Verified | MadeFrom | Pushed | FoundMeanwhile | Signed |
         Attested | LedgerUnasked | KernelLoaded)
Emit = Callable[[Event], None]


@dataclass(frozen=True)
class Outcome:
    tag: str
    action: TagAction
    done: bool = False  # False under --dry-run
    digest: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    reference: str = ""
    modules: ModuleOrigin | None = None
    shared: Shared | None = None  # the last word on the registry's shared modules
    ahead: tuple[str, ...] = ()  # what the build took of what was fetched ahead (ensure.ahead)
    signature: str | None = None  # the cosign signature's tag, when the image was signed ($GPUALIGN_COSIGN_KEY)
    attestations: tuple[str, ...] = ()  # its signed SBOM and provenance's tag, and the attached SBOM's
    evidence: Evidence | None = None  # what a build made the image from
    unasked: str | None = None  # a dry run's: why the ledger was not asked whether it holds the tag
    kernel_load: dict[str, Any] | None = None  # the kernel's verdict, booted, before the push (a build's)

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "action": self.action, "done": self.done, "image": self.reference,
                "digest": self.digest, "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
                "verification": self.verification, "modules": str(self.modules) if self.modules else None,
                "shared": str(self.shared) if self.shared else None, "fetched_ahead": list(self.ahead) or None,
                "signature": self.signature, "attestations": list(self.attestations) or None,
                "ledger_unasked": self.unasked, "kernel_load": self.kernel_load}


def outcome_of(tag: str, action: TagAction, reference: str, events: Iterable[Event], *,
               digest: str | None = None, done: bool = False) -> Outcome:
    """The tag's outcome as its events tell it: `digest` and `done` as planned, before any event (a present tag's)."""
    seconds: dict[str, float] = {}
    verification: dict[str, Any] | None = None
    modules: ModuleOrigin | None = None
    shared: Shared | None = None
    ahead: list[str] = []
    signature: str | None = None
    attestations: tuple[str, ...] = ()
    evidence: Evidence | None = None
    unasked: str | None = None
    kernel_load: dict[str, Any] | None = None
    for event in events:
        match event:
            case Timed(step, spent):
                seconds[step] = spent
            case ModulesTaken(origin):
                modules = origin
            case Shared():
                shared = event
            case FetchedAhead(what):
                ahead.append(what)
            case Verified(record):
                verification = record
            case MadeFrom(made_from):
                evidence = made_from
            case Pushed(pushed):
                digest, done = pushed, True
            case FoundMeanwhile(found):
                action, digest, done = TagAction.PRESENT, found, True
            case Signed(where):
                signature = where
            case Attested(tags):
                attestations = tags
            case LedgerUnasked(why):
                unasked = why
            case KernelLoaded(record):
                kernel_load = record
    return Outcome(tag=tag, action=action, done=done, digest=digest, seconds=seconds, verification=verification,
                   reference=reference, modules=modules, shared=shared, ahead=tuple(ahead), signature=signature,
                   attestations=attestations, evidence=evidence, unasked=unasked, kernel_load=kernel_load)
