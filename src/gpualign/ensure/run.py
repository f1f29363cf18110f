"""One ensure pass: for each tag, present (nothing to do), mirror (the upstream publishes it) or build (Debian 12
and 13, amd64 and arm64: its steps are ensure.build), verified against the kernel in its tag before anything is
pushed.

Idempotent: a tag already in the ledger costs one manifest HEAD. Two runs never build the same image twice: each
tag is worked under a file lock (and, with --lease, a Lease on the cluster for runs on other machines), and a run
that waited for it looks again before building.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base.errors import BadInput, GpualignError
from gpualign.ensure import registry_lock, tagspec
from gpualign.ensure.archive import Archive, file_lock
from gpualign.model.makers import open_problem

if TYPE_CHECKING:  # the build's modules (pyelftools, cryptography, asn1crypto) load only when something is built
    from gpualign.ensure import sign
    from gpualign.ensure.ahead import Ahead
    from gpualign.ensure.lease import Leases
    from gpualign.ensure.verify import Verification
    from gpualign.ledger.registry import RegistryClient



class TagAction(StrEnum):
    """What ensure does for a tag (its plan's and outcome's `action`)."""

    PRESENT = "present"  # in the ledger, and it passes the check: nothing to do
    MIRROR = "mirror"
    BUILD = "build"
    WRONG = "wrong"  # in the ledger under the tag, but it fails the check: reported, replaced only with replace_wrong


Say = Callable[[str, str], None]  # (tag, message)


class PresentButWrong(GpualignError):
    """A tag in the ledger whose image fails the check (exit 1); replaced only when asked to."""

    exit_code = 1
    word = "refused"


class NotVerified(GpualignError):
    """The modules would not load on the kernel in the tag (exit 1; nothing was pushed)."""

    exit_code = 1
    word = "refused"


@dataclass
class Outcome:
    tag: str
    action: TagAction
    done: bool = False  # False under --dry-run
    digest: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    reference: str = ""
    modules: str = ""  # where a build's modules came from: compiled | cache | shared (pulled) | given
    shared: str = ""  # what happened with the registry's shared modules: pulled, pushed, refused: …, …
    ahead: list[str] = field(default_factory=list)  # what the build took of what was fetched ahead (ensure.ahead)
    signature: str | None = None  # the cosign signature's tag, when the image was signed ($GPUALIGN_COSIGN_KEY)
    attestations: tuple[str, ...] = ()  # its signed SBOM and provenance's tag, and the attached SBOM's
    evidence: Any = None  # what a build made the image from (gpualign.model.attestations.Evidence)

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "action": self.action, "done": self.done, "image": self.reference,
                "digest": self.digest, "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
                "verification": self.verification, "modules": self.modules or None, "shared": self.shared or None,
                "fetched_ahead": self.ahead or None, "signature": self.signature,
                "attestations": list(self.attestations) or None}


@dataclass
class Options:
    target: RegistryClient
    upstream: RegistryClient | None = None
    dry_run: bool = False
    jobs: int = 2
    flavour: str = "proprietary"
    modules_from: Path | None = None  # verify and push these modules instead of compiling
    signing: sign.SigningKey | None = None  # sign every module for Secure Boot, and verify the signatures
    leases: Leases | None = None  # on a cluster: a Lease per tag, so runs on other machines never build it too
    together: tuple[str, ...] = ()  # the kernels this run builds: a new build root gets all their headers at once
    authfile: str | None = None
    archive: Archive = field(default_factory=Archive)
    check_present: str = "off"  # a present tag's modules are judged too: judge.OFF | STRICT (labels always)
    replace_wrong: bool = False  # a present tag that fails the check is made again and pushed over it
    share_pull: bool = True  # take modules another build compiled from the registry (ensure.shared), verified
    share_push: bool = True  # share the modules this build compiled, once verified
    ahead: Ahead | None = None  # the registry's modules and user space guessed and fetched while the archive is read
    cosign_key: Any = field(default_factory=lambda: _configured_key())  # signs what is pushed, as cosign signs


UNVERIFIED_PREFIX = "unverified: "  # a present image's problem that is not "wrong": nothing vouches for it


def tag_lock(tag: str) -> AbstractContextManager[None]:
    return file_lock(f"{tag}.lock")


def verify_modules(modules: list[Path], spec: tagspec.TagSpec, driver_version: str, archive: Archive,
                   signing: sign.SigningKey | None = None) -> Verification:
    """The kernel's load checks against the tag's kernel (its Module.symvers from the archive); with a signing key,
    also the signature check of a Secure Boot kernel that holds that key's certificate."""
    from gpualign.ensure import kmod, symvers
    from gpualign.ensure.verify import verify

    table = symvers.parse(archive.symvers(spec.kernel).read_text(), f"Module.symvers of {spec.kernel}")
    read = [kmod.read_file(p) for p in modules]
    return verify(read, spec.kernel, table, driver_version, [signing.cert] if signing else None)


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
    from gpualign.base.errors import Unreachable

    try:
        return upstream.digest(tag) is not None
    except Unreachable as err:
        raise Unreachable(f"{err.message} (asking the upstream for {tag}: pass --upstream REGISTRY to mirror from "
                          "a registry you can reach, or --upstream none to build without asking)") from None


def worth_fetching_ahead(spec: tagspec.TagSpec, opts: Options) -> bool:
    """A build that will read Debian's archive and may take the registry's shared modules and user space: a Debian
    tag missing from the ledger, with no cached modules (ensure.ahead fetches them while the archive is read)."""
    from gpualign.ensure import buildroot
    from gpualign.model.makers import SUITES

    return (not opts.dry_run and opts.share_pull and opts.modules_from is None and opts.upstream is None
            and spec.os_tag in SUITES and opts.flavour in buildroot.FLAVOURS
            and opts.target.digest(spec.tag) is None and not compiled_before(spec, opts))


def present_problem(spec: tagspec.TagSpec, opts: Options) -> str | None:
    """Why the image in the ledger under the tag is not what ensure would make, or None: its labels (always), its
    modules against the tag's kernel (check_present), and with a signing key, whether it is signed by that key's
    certificate (a Secure Boot node refuses anything else). The judgement check and the walk make."""
    from gpualign.ensure.judge import judge

    image = f"{opts.target.ref.image}:{spec.tag}"
    found = judge({image: (spec.kernel,)}, docker_config=Path(opts.authfile) if opts.authfile else None,
                  modules=opts.check_present)
    if image in found.wrong:
        return found.wrong[image]
    held = found.flavours.get(image)
    if held and opts.modules_from is None and held != opts.flavour:
        return f"it holds {held} kernel modules, not the {opts.flavour} ones asked for"
    if image in found.unverified:
        from gpualign.ensure.judge import NO_LABELS

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
        from gpualign.ensure.build import build

        return _signed(build(spec, opts, out, say), opts, say)


def _configured_key() -> Any:
    from gpualign.ensure.signatures import configured_key

    return configured_key()


def _signed(out: Outcome, opts: Options, say: Say) -> Outcome:
    """The image just pushed, signed by its digest as cosign signs it, when a key is configured."""
    if opts.cosign_key is None or not out.done or out.digest is None:
        return out
    from gpualign.ensure.signatures import attest, sign

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


def compiled_before(spec: tagspec.TagSpec, opts: Options) -> bool:
    """The modules for this tag are cached: a run needs neither the archive nor a build root for them."""
    from gpualign.ensure import buildroot, debian

    return opts.modules_from is None and opts.flavour in buildroot.FLAVOURS and \
        debian.cached_modules(opts.archive.for_tag_kernel(spec.os_tag, spec.kernel), spec.kernel,
                              opts.flavour) is not None


_inputs_started: set[str] = set()
_inputs_lock = threading.Lock()


def prepare_image_inputs(archive: Archive, driver_version: str) -> None:
    """Make what the image needs besides the modules in the background while the compile runs: the image's base and
    the user space at the modules' version (neither depends on the modules; assembly takes the same locks and waits
    for them, or makes them itself if this failed, and reports it). Called as a compile starts, once per run and
    driver version: not before, where it would contend with the build root for the archive, and not on a warm run,
    where the image assembled before is pushed again. On one kernel of 2 cores it moves ~10 s of downloading and
    unpacking off the path after the compile (docs/benchmarks.md, "ensure")."""
    from gpualign.ensure import image, userspace

    with _inputs_lock:
        if f"{archive.key}/{driver_version}" in _inputs_started:
            return
        _inputs_started.add(f"{archive.key}/{driver_version}")

    def make() -> None:
        with contextlib.suppress(GpualignError):
            image.ensure_base(archive.suite, archive.arch)
        with contextlib.suppress(GpualignError):
            userspace.fetch(archive, driver_version)

    threading.Thread(target=make, name="ensure-image-inputs", daemon=True).start()


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

