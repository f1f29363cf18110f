"""One ensure pass: for each tag, present (nothing to do), mirror (the upstream publishes it) or build (Debian 12
and 13, amd64 and arm64: its steps are ensure.build), verified against the kernel in its tag before anything is
pushed.

Idempotent: a tag already in the ledger costs one manifest HEAD. Two runs never build the same image twice: each
tag is worked under a file lock (and, with --lease, a Lease on the cluster for runs on other machines), and a run
that waited for it looks again before building.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpualign.base.errors import BadInput, Unreachable
from gpualign.ensure import buildroot, registry_lock
from gpualign.ensure.build import build
from gpualign.ensure.signatures import attest, sign
from gpualign.ensure.stage import (
    Options,
    Outcome,
    PresentButWrong,
    Say,
    TagAction,
    compiled_before,
    tag_lock,
)
from gpualign.judging import tagspec
from gpualign.judging.judge import judge
from gpualign.model.makers import SUITES, open_problem

if TYPE_CHECKING:  # the build's modules (pyelftools, cryptography, asn1crypto) load only when something is built
    from gpualign.ledger.registry import RegistryClient



UNVERIFIED_PREFIX = "unverified: "  # a present image's problem that is not "wrong": nothing vouches for it


@dataclass(frozen=True)
class TagPlan:
    spec: tagspec.TagSpec
    action: TagAction
    digest: str | None = None  # in the ledger, when present
    problem: str | None = None  # why the present image fails the check (wrong, or replaced)


def plan_one(tag: str, opts: Options) -> TagPlan:
    """What ensure would do for a tag: one manifest HEAD when it is present."""
    spec = tagspec.parse(tag)
    problem = None
    if (digest := opts.target.digest(spec.tag)) is not None:
        problem = present_problem(spec, opts)
        if problem is None:
            return TagPlan(spec, TagAction.PRESENT, digest)
        if not opts.replace_wrong:
            return TagPlan(spec, TagAction.WRONG, digest, problem)
    if opts.upstream is not None and _upstream_has(opts.upstream, spec.tag):
        return TagPlan(spec, TagAction.MIRROR, digest, problem)
    # an OS without a recipe here, or a branch its archive does not carry now: BadInput now
    table = opts.archive.debian_table(spec.os_tag)
    tagspec.buildable_here(spec, debian=table)
    release = table.get(spec.os_tag)
    if opts.flavour == "open" and opts.modules_from is None and release is not None and \
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
        raise Unreachable(f"{err.message} (asking the upstream for {tag}: pass --upstream REGISTRY to mirror from "
                          "a registry you can reach, or --upstream none to build without asking)") from None


def worth_fetching_ahead(spec: tagspec.TagSpec, opts: Options) -> bool:
    """A build that will read Debian's archive and may take the registry's shared modules and user space: a Debian
    tag missing from the ledger, with no cached modules (ensure.ahead fetches them while the archive is read)."""
    return (not opts.dry_run and opts.share_pull and opts.modules_from is None and opts.upstream is None
            and spec.os_tag in SUITES and opts.flavour in buildroot.FLAVOURS
            and opts.target.digest(spec.tag) is None and not compiled_before(spec, opts))


def present_problem(spec: tagspec.TagSpec, opts: Options) -> str | None:
    """Why the image in the ledger under the tag is not what ensure would make, or None: its labels (always), its
    modules against the tag's kernel (check_present), and with a signing key, whether it is signed by that key's
    certificate (a Secure Boot node refuses anything else). The judgement check and the walk make."""
    image = f"{opts.target.ref.image}:{spec.tag}"
    found = judge({image: (spec.kernel,)}, docker_config=Path(opts.authfile) if opts.authfile else None,
                  modules=opts.check_present)
    if image in found.wrong:
        return found.wrong[image]
    held = found.flavours.get(image)
    if held and opts.modules_from is None and held != opts.flavour:
        return f"it holds {held} kernel modules, not the {opts.flavour} ones asked for"
    if image in found.unverified:
        from gpualign.judging.judge import NO_LABELS

        reason = found.unverified[image]
        return f"{UNVERIFIED_PREFIX}{reason}" if reason == NO_LABELS else \
            f"{UNVERIFIED_PREFIX}its modules could not be verified: {reason}"
    if opts.signing is not None:
        labels = ((opts.target.image_config(spec.tag) or {}).get("config") or {}).get("Labels") or {}
        signed = labels.get("io.gpualign.signing-cert-sha256")
        want = opts.signing.describe()["cert_sha256"]
        if not signed:
            return f"it is not signed (a Secure Boot node that trusts {opts.signing.signer} refuses its modules)"
        if signed != want:
            return f"it is signed with another certificate (sha256 {signed[:16]}…), not {opts.signing.signer}'s"
    return None


def ensure_one(tag: str, opts: Options, say: Say, planned: TagPlan | None = None) -> Outcome:
    plan = planned or plan_one(tag, opts)
    spec, action = plan.spec, plan.action
    out = Outcome(spec.tag, action, reference=f"{opts.target.ref.image}:{spec.tag}")
    if action == TagAction.PRESENT:
        out.digest, out.done = plan.digest, True
        say(spec.tag, "present in the ledger: nothing to do")
        return out
    if action == TagAction.WRONG:
        out.digest = plan.digest
        problem = plan.problem or ""
        if problem.startswith(UNVERIFIED_PREFIX):  # gpualign cannot vouch for it: never "nothing to do"
            raise PresentButWrong(f"{spec.tag}: present but unverified: {problem.removeprefix(UNVERIFIED_PREFIX)} "
                                  f"(gpualign ensure {spec.tag} --replace-wrong makes it again, verified, and pushes "
                                  "it over the tag)")
        raise PresentButWrong(f"{spec.tag}: present but wrong: {problem} (gpualign ensure {spec.tag} "
                              "--replace-wrong makes it again and pushes it over the tag)")
    if plan.problem:
        say(spec.tag, f"present but wrong ({plan.problem}): replacing it")
    if opts.dry_run:  # the caller prints the verdict, once
        return out
    with tag_lock(spec.tag), (opts.leases.hold(spec.tag) if opts.leases else contextlib.nullcontext()), \
            registry_lock.hold(opts.target, spec.tag, lambda message: say(spec.tag, message)):
        if opts.target.digest(spec.tag) not in (None, plan.digest if plan.problem else None):
            # another run made it while this one waited
            out.action, out.digest, out.done = TagAction.PRESENT, opts.target.digest(spec.tag), True
            say(spec.tag, "present in the ledger (made by another run meanwhile): nothing to do")
            return out
        if action == TagAction.MIRROR:
            from gpualign.ensure import image, mirror

            assert opts.upstream is not None
            t0 = time.monotonic()
            source = opts.upstream.digest(spec.tag)
            assert source is not None
            say(spec.tag, f"mirror: {opts.upstream.ref.image}@{source}")
            mirror.copy(opts.upstream.ref, opts.target.ref, spec.tag, source, authfile=opts.authfile)
            out.digest = opts.target.digest(spec.tag)
            out.seconds["mirror"] = time.monotonic() - t0
            if out.digest != source:
                raise image.PushRefused(f"{spec.tag}: the ledger answers digest {out.digest} after mirroring "
                                        f"{source}")
            out.done = True
            say(spec.tag, f"mirrored: {out.digest}")
            return _signed(out, opts, say)
        return _signed(build(spec, opts, out, say), opts, say)


def _signed(out: Outcome, opts: Options, say: Say) -> Outcome:
    """The image just pushed, signed by its digest as cosign signs it, when a key is configured."""
    if opts.cosign_key is None or not out.done or out.digest is None:
        return out

    t0 = time.monotonic()
    out.signature = sign(opts.target, out.tag, opts.cosign_key)
    out.seconds["sign"] = time.monotonic() - t0
    say(out.tag, f"signed: {out.signature}")
    if out.evidence is not None:  # a build's: what it is made of and how, signed
        t0 = time.monotonic()
        out.attestations = attest(opts.target, out.tag, opts.cosign_key, out.evidence)
        out.seconds["attest"] = time.monotonic() - t0
        say(out.tag, f"attested: SBOM and provenance in {out.attestations[0]}, SBOM in {out.attestations[1]}")
    return out


def require_tools() -> None:
    """What a build needs on this machine, checked before any build starts (BadInput naming the first missing)."""
    import os
    import shutil

    for tool, why in (("buildah", "the driver image is assembled with buildah"),
                      ("mmdebstrap", "the build root is made with mmdebstrap"),
                      ("chroot", "the modules are compiled in the build root under chroot"),
                      ("depmod", "the image's module index is made with depmod (kmod)")):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            raise BadInput(f"{tool} is not installed: {why} (scripts/install-debs installs it)")

