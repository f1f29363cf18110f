"""One ensure pass: for each tag, present (nothing to do), mirror (the upstream publishes it) or build (Debian 12
and 13, amd64 and arm64: its steps are ensure.build), verified against the kernel in its tag before anything is
pushed.

Idempotent: a tag already in the ledger costs one manifest HEAD. Two runs never build the same image twice: each
tag is worked under a file lock (and, with --lease, a Lease on the cluster for runs on other machines), and a run
that waited for it looks again before building.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpualign.base.errors import BadInput, Unreachable
from gpualign.ensure import buildroot, registry_lock
from gpualign.ensure.build import build
from gpualign.ensure.image import PushRefused
from gpualign.ensure.kit import Kit, compiled_before
from gpualign.ensure.outcome import (
    Attested,
    Emit,
    Event,
    FoundMeanwhile,
    LedgerUnasked,
    Outcome,
    Pushed,
    Signed,
    TagAction,
    Timed,
    outcome_of,
)
from gpualign.ensure.refusals import UpstreamUnreachable
from gpualign.ensure.signatures import attest, sign
from gpualign.ensure.stage import Options, PresentButWrong, Say, UpstreamNotVouched, tag_lock
from gpualign.judging import tagspec
from gpualign.judging.judge import AUTO, NO_LABELS, STRICT, judge
from gpualign.model import driver_tag
from gpualign.model.flavours import Flavour
from gpualign.model.makers import SUITES, open_problem

if TYPE_CHECKING:  # the build's modules (pyelftools, cryptography, asn1crypto) load only when something is built
    from gpualign.ledger.registry import RegistryClient



@dataclass(frozen=True)
class PresentProblem:
    """Why the image in the ledger under a tag is not what ensure would make."""

    why: str
    unverified: bool = False  # not wrong, but nothing vouches for it: never "nothing to do"

    def __str__(self) -> str:
        return f"unverified: {self.why}" if self.unverified else self.why


@dataclass(frozen=True)
class TagPlan:
    spec: driver_tag.TagSpec
    action: TagAction
    digest: str | None = None  # in the ledger, when present
    problem: PresentProblem | None = None  # why the present image fails the check (wrong, or replaced)
    unasked: str | None = None  # a dry run's: why the ledger was not asked whether it holds the tag


def plan_one(spec: driver_tag.TagSpec, opts: Options) -> TagPlan:
    """What ensure would do for a tag (read once, where it was given): one manifest HEAD when it is present."""
    problem = None
    try:
        digest = opts.target.digest(spec.tag)
    except Unreachable as err:
        if not opts.dry_run:
            raise
        # a dry run plans offline: what would be made if the ledger lacks the tag, and says it did not ask
        return dataclasses.replace(_plan_missing(spec, None, None, opts), unasked=err.message)
    if digest is not None:
        problem = present_problem(spec, opts)
        if problem is None:
            return TagPlan(spec, TagAction.PRESENT, digest)
        if not opts.replace_wrong:
            return TagPlan(spec, TagAction.WRONG, digest, problem)
    return _plan_missing(spec, digest, problem, opts)


def _plan_missing(spec: driver_tag.TagSpec, digest: str | None, problem: PresentProblem | None,
                  opts: Options) -> TagPlan:
    """A tag the ledger lacks (or holds wrong, to replace): mirrored when the upstream publishes it, else built."""
    if opts.upstream is not None and _upstream_has(opts.upstream, spec.tag):
        return TagPlan(spec, TagAction.MIRROR, digest, problem)
    # an OS without a recipe here, or a branch its archive does not carry now: BadInput now
    table = opts.archive.debian_table(spec.os_tag)
    tagspec.buildable_here(spec, debian=table)
    release = table.get(spec.os_tag)
    if opts.flavour == Flavour.OPEN and opts.modules_from is None and release is not None and \
            (why := open_problem(release, spec.branch)) is not None:
        raise BadInput(f"{spec.tag}: {why}")
    if opts.dry_run and opts.modules_from is None and not compiled_before(spec, opts):
        # as the build will refuse it
        opts.archive.for_tag_kernel(spec.os_tag, spec.kernel).require_headers(spec.kernel)
    return TagPlan(spec, TagAction.BUILD, digest, problem)


def _upstream_has(upstream: RegistryClient, tag: str) -> bool:
    """Whether the upstream publishes the tag; an upstream that cannot be asked says how to name another."""
    try:
        return upstream.digest(tag) is not None
    except Unreachable as err:
        raise UpstreamUnreachable(err.message, tag) from None


def worth_fetching_ahead(spec: driver_tag.TagSpec, opts: Options) -> bool:
    """A build that will read Debian's archive and may take the registry's shared modules and user space: a Debian
    tag missing from the ledger, with no cached modules (ensure.ahead fetches them while the archive is read)."""
    return (not opts.dry_run and opts.share_pull and opts.modules_from is None and opts.upstream is None
            and spec.os_tag in SUITES and opts.flavour in buildroot.FLAVOURS
            and opts.target.digest(spec.tag) is None and not compiled_before(spec, opts))


def present_problem(spec: driver_tag.TagSpec, opts: Options) -> PresentProblem | None:
    """Why the image in the ledger under the tag is not what ensure would make, or None: its labels (always), its
    modules against the tag's kernel (check_present), and with a signing key, whether it is signed by that key's
    certificate (a Secure Boot node refuses anything else). The judgement check and the walk make."""
    image = f"{opts.target.ref.image}:{spec.tag}"
    found = judge({image: (spec.kernel,)}, docker_config=Path(opts.authfile) if opts.authfile else None,
                  modules=opts.check_present, trusted=opts.trusted)
    if image in found.wrong:
        return PresentProblem(found.wrong[image])
    held = found.flavours.get(image)
    if held and opts.modules_from is None and held != opts.flavour:
        return PresentProblem(f"it holds {held} kernel modules, not the {opts.flavour} ones asked for")
    if image in found.unverified:
        reason = found.unverified[image]
        return PresentProblem(reason if reason == NO_LABELS else f"its modules could not be verified: {reason}",
                              unverified=True)
    if opts.signing is not None:
        labels = ((opts.target.image_config(spec.tag) or {}).get("config") or {}).get("Labels") or {}
        signed = labels.get("io.gpualign.signing-cert-sha256")
        want = opts.signing.describe()["cert_sha256"]
        if not signed:
            return PresentProblem(f"it is not signed (a Secure Boot node that trusts {opts.signing.signer} refuses "
                                  "its modules)")
        if signed != want:
            return PresentProblem(f"it is signed with another certificate (sha256 {signed[:16]}…), not "
                                  f"{opts.signing.signer}'s")
    return None


def ensure_one(spec: driver_tag.TagSpec, opts: Options, say: Say, planned: TagPlan | None = None,
               kit: Kit | None = None) -> Outcome:
    """Make the tag exist as planned: its outcome is the fold of what the run's stages emit."""
    plan = planned or plan_one(spec, opts)
    spec, action = plan.spec, plan.action
    reference = f"{opts.target.ref.image}:{spec.tag}"
    if action == TagAction.PRESENT:
        say(spec.tag, "present in the ledger: nothing to do")
        return outcome_of(spec.tag, action, reference, (), digest=plan.digest, done=True)
    if action == TagAction.WRONG:
        problem = plan.problem
        assert problem is not None  # a WRONG plan names its problem
        if problem.unverified:  # gpualign cannot vouch for it: never "nothing to do"
            raise PresentButWrong(f"{spec.tag}: present but unverified: {problem.why} "
                                  f"(gpualign ensure {spec.tag} --replace-wrong makes it again, verified, and pushes "
                                  "it over the tag)")
        raise PresentButWrong(f"{spec.tag}: present but wrong: {problem} (gpualign ensure {spec.tag} "
                              "--replace-wrong makes it again and pushes it over the tag)")
    if plan.problem:
        say(spec.tag, f"present but wrong ({plan.problem}): replacing it")
    if opts.dry_run:  # the caller prints the verdict, once
        return outcome_of(spec.tag, action, reference, [LedgerUnasked(plan.unasked)] if plan.unasked else ())
    kit = kit or Kit()
    events: list[Event] = []
    with tag_lock(spec.tag), (opts.leases.hold(spec.tag) if opts.leases else contextlib.nullcontext()), \
            registry_lock.hold(opts.target, spec.tag, lambda message: say(spec.tag, message)):
        if (found := opts.target.digest(spec.tag)) not in (None, plan.digest if plan.problem else None):
            say(spec.tag, "present in the ledger (made by another run meanwhile): nothing to do")
            return outcome_of(spec.tag, action, reference, [FoundMeanwhile(found)])
        if action == TagAction.MIRROR:
            _mirror(spec, opts, events.append, say, kit)
        else:
            build(spec, opts, events.append, say, kit)
        _sign(spec.tag, outcome_of(spec.tag, action, reference, events), opts, events.append, say)
    return outcome_of(spec.tag, action, reference, events)


def _mirror(spec: driver_tag.TagSpec, opts: Options, emit: Emit, say: Say, kit: Kit) -> None:
    """Copy the upstream's image by its digest; the ledger must answer that digest after."""
    assert opts.upstream is not None
    t0 = time.monotonic()
    source = opts.upstream.digest(spec.tag)
    assert source is not None
    _vouch_for_upstream(spec, source, opts, say, kit)
    emit(Timed("judge", time.monotonic() - t0))
    say(spec.tag, f"mirror: {opts.upstream.ref.image}@{source}")
    kit.mirror(opts.upstream.ref, opts.target.ref, spec.tag, source, opts.authfile)
    digest = opts.target.digest(spec.tag)
    emit(Timed("mirror", time.monotonic() - t0))
    if digest != source:
        raise PushRefused(f"{spec.tag}: the ledger answers digest {digest} after mirroring {source}")
    emit(Pushed(digest))
    say(spec.tag, f"mirrored: {digest}")


def _vouch_for_upstream(spec: driver_tag.TagSpec, digest: str, opts: Options, say: Say, kit: Kit) -> None:
    """What is mirrored gets the team's signature, so it passes the judgement a build passes first: the upstream's
    own signature over the digest where its keys are given, then its labels and modules against the tag's kernel.
    Refused: nothing is copied."""
    assert opts.upstream is not None
    source = f"{opts.upstream.ref.image}:{spec.tag}"
    if opts.upstream_keys:
        from gpualign.judging.signature_check import verify

        verdict = verify(opts.upstream, digest, opts.upstream_keys)
        if not verdict.ok:
            raise UpstreamNotVouched(f"{spec.tag}: the upstream's image {source}@{digest} is not signed by its "
                                     f"key ({verdict.why}): not mirrored, not signed")
        say(spec.tag, f"upstream signature verified: {verdict.why or 'signed by its key'}")
    modules = STRICT if opts.check_present == STRICT else AUTO
    why = kit.vouch(source, spec.kernel, spec.kernel_value.arch_or_amd64, opts.authfile, modules)
    if why is not None:
        raise UpstreamNotVouched(f"{spec.tag}: the upstream's image {source}@{digest} is {why}: not mirrored, not "
                                 "signed (gpualign signs only what it built or judged)")
    say(spec.tag, "upstream image judged: its labels and modules agree with its tag")


def _sign(tag: str, made: Outcome, opts: Options, emit: Emit, say: Say) -> None:
    """The image just pushed, signed by its digest as cosign signs it, when a key is configured."""
    if opts.cosign_key is None or not made.done or made.digest is None:
        return
    t0 = time.monotonic()
    signature = sign(opts.target, tag, opts.cosign_key)
    emit(Signed(signature))
    emit(Timed("sign", time.monotonic() - t0))
    say(tag, f"signed: {signature}")
    if made.evidence is not None:  # a build's: what it is made of and how, signed
        t0 = time.monotonic()
        attestations = attest(opts.target, tag, opts.cosign_key, made.evidence)
        emit(Attested(attestations))
        emit(Timed("attest", time.monotonic() - t0))
        say(tag, f"attested: SBOM and provenance in {attestations[0]}, SBOM in {attestations[1]}")


def require_tools(kernel_load: frozenset[str] = frozenset(), secure_boot: bool = False) -> None:
    """What a build needs on this machine, checked before any build starts (BadInput naming the first missing);
    kernel_load: the architectures whose kernels are booted, and what boots them (qemu, busybox); secure_boot: the
    modules are signed, so the kernel is booted under Secure Boot (OVMF, AAVMF)."""
    import os
    import shutil

    from gpualign.ensure.refusals import NoKernelVM

    for tool, why in (("buildah", "the driver image is assembled with buildah"),
                      ("mmdebstrap", "the build root is made with mmdebstrap"),
                      ("chroot", "the modules are compiled in the build root under chroot"),
                      ("depmod", "the image's module index is made with depmod (kmod)")):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            raise BadInput(f"{tool} is not installed: {why} (scripts/install-debs installs it)")
    from gpualign.judging.kernel_boot import QEMU, QEMU_PACKAGES

    for arch in sorted(kernel_load):
        qemu = QEMU.get(arch, ("",))[0]
        if qemu and shutil.which(qemu) is None:
            raise NoKernelVM(qemu, QEMU_PACKAGES[arch])
    if kernel_load and not os.path.exists("/bin/busybox"):
        raise NoKernelVM("busybox", "busybox-static")
    from gpualign.judging import secure_boot as sb

    for arch in sorted(kernel_load) if secure_boot else []:
        edk2 = sb.FIRMWARE.get(arch)
        if edk2 is not None and not (edk2.code.exists() and edk2.template.exists()):
            raise NoKernelVM(str(edk2.code), edk2.package)

