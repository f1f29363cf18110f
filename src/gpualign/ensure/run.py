"""One ensure pass: for each tag, present (nothing to do), mirror (the upstream publishes it) or build (Debian 12
here), verified against the kernel in its tag before anything is pushed.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.ensure import registry_lock, tagspec
from gpualign.ensure.archive import Archive, file_lock
from gpualign.errors import BadInput, GpualignError
from gpualign.makers import open_problem

if TYPE_CHECKING:  # the build's modules (pyelftools, cryptography, asn1crypto) load only when something is built
    from gpualign.ensure import image as image_mod
    from gpualign.ensure import sign
    from gpualign.ensure.lease import Leases
    from gpualign.ensure.verify import Verification
    from gpualign.ledger.registry import RegistryClient

PRESENT, MIRROR, BUILD = "present", "mirror", "build"
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
    action: str  # present | mirror | build
    done: bool = False  # False under --dry-run
    digest: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    reference: str = ""
    modules: str = ""  # where a build's modules came from: compiled | cache | shared (pulled) | given
    shared: str = ""  # what happened with the registry's shared modules: pulled, pushed, refused: …, …

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "action": self.action, "done": self.done, "image": self.reference,
                "digest": self.digest, "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
                "verification": self.verification, "modules": self.modules or None, "shared": self.shared or None}


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
class Plan:
    spec: tagspec.TagSpec
    action: str  # present | mirror | build | wrong
    digest: str | None = None  # in the ledger, when present
    problem: str | None = None  # why the present image fails the check (wrong, or replaced)


def plan_one(tag: str, opts: Options) -> Plan:
    """What ensure would do for a tag: one manifest HEAD when it is present."""
    spec = tagspec.parse(tag)
    problem = None
    if (digest := opts.target.digest(spec.tag)) is not None:
        problem = present_problem(spec, opts)
        if problem is None:
            return Plan(spec, PRESENT, digest)
        if not opts.replace_wrong:
            return Plan(spec, WRONG, digest, problem)
    if opts.upstream is not None and _upstream_has(opts.upstream, spec.tag):
        return Plan(spec, MIRROR, digest, problem)
    # an OS without a recipe here, or a branch its archive does not carry now: BadInput now
    table = opts.archive.debian_table(spec.os_tag)
    tagspec.buildable_here(spec, debian=table)
    release = table.get(spec.os_tag)
    if opts.flavour == "open" and opts.modules_from is None and release is not None and \
            (why := open_problem(release, spec.branch)) is not None:
        raise BadInput(f"{spec.tag}: {why}")
    if opts.dry_run and opts.modules_from is None and not _compiled_before(spec, opts):
        # as the build will refuse it
        opts.archive.for_tag_kernel(spec.os_tag, spec.kernel).require_headers(spec.kernel)
    return Plan(spec, BUILD, digest, problem)


def _upstream_has(upstream: RegistryClient, tag: str) -> bool:
    """Whether the upstream publishes the tag; an upstream that cannot be asked says how to name another."""
    from gpualign.errors import Unreachable

    try:
        return upstream.digest(tag) is not None
    except Unreachable as err:
        raise Unreachable(f"{err.message} (asking the upstream for {tag}: pass --upstream REGISTRY to mirror from "
                          "a registry you can reach, or --upstream none to build without asking)") from None


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


def ensure_one(tag: str, opts: Options, say: Say, planned: Plan | None = None) -> Outcome:
    plan = planned or plan_one(tag, opts)
    spec, action = plan.spec, plan.action
    out = Outcome(spec.tag, action, reference=f"{opts.target.ref.image}:{spec.tag}")
    if action == PRESENT:
        out.digest, out.done = plan.digest, True
        say(spec.tag, "present in the ledger: nothing to do")
        return out
    if action == WRONG:
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
            out.action, out.digest, out.done = PRESENT, opts.target.digest(spec.tag), True
            say(spec.tag, "present in the ledger (made by another run meanwhile): nothing to do")
            return out
        if action == MIRROR:
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
            return out
        return _build(spec, opts, out, say)


def _build(spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say) -> Outcome:
    from gpualign.ensure import buildroot, debian, image, kmod

    archive = opts.archive.for_tag_kernel(spec.os_tag, spec.kernel)  # the tag's release and its kernel's CPU
    t0 = time.monotonic()
    say(spec.tag, f"headers: linux-headers-{spec.kernel}")
    if not buildroot.ready(archive, spec.kernel) and not _compiled_before(spec, opts):
        archive.require_headers(spec.kernel)  # a kernel Debian does not serve is refused before anything is made
    out.seconds["headers"] = time.monotonic() - t0
    if opts.modules_from is not None:
        modules = sorted(opts.modules_from.glob("*.ko"))
        if not modules:
            raise BadInput(f"--modules-from {opts.modules_from}: no .ko file there")
        read = [kmod.read_file(p) for p in modules]
        driver_version = next((m.field("version") for m in read if m.field("version")), "") or ""
        say(spec.tag, f"modules: {len(modules)} from {opts.modules_from} (not compiled here)")
        out.modules = "given"
    else:
        pulled = _pull_shared(spec, opts, out, say) if opts.share_pull and not _compiled_before(spec, opts) \
            else None
        built = debian.compile_modules(archive, spec.kernel, opts.flavour, jobs=opts.jobs,
                                       progress=lambda m: say(spec.tag, m), together=opts.together,
                                       on_compile=lambda version: prepare_image_inputs(archive, version))
        modules, driver_version = built.modules, built.driver_version
        out.seconds["compile"] = built.compile_seconds
        out.seconds["compile_cpu"] = built.compile_cpu_seconds
        if not built.cached:
            say(spec.tag, f"compiled: {len(built.modules)} modules in {built.compile_seconds:.0f}s "
                          f"({built.compile_cpu_seconds:.0f} CPU-s)")
        from gpualign.ensure import shared

        origin = shared.pulled_from(built.directory)
        out.modules = "compiled" if not built.cached else "shared" if origin else "cache"
        if pulled is not None and origin is not None:
            prepare_image_inputs(archive, driver_version)  # no compile to hide them behind: start them now
    unsigned = modules  # what is shared, once verified
    if not driver_version.startswith(f"{spec.branch}."):
        raise NotVerified(f"{spec.tag}: the modules are NVIDIA {driver_version or '(no version)'}, not branch "
                          f"{spec.branch}; nothing pushed")
    if opts.signing is not None:
        t0 = time.monotonic()
        flavour = opts.flavour if opts.modules_from is None else "given-" + image.modules_key(modules)[:16]
        with buildroot.held(archive, spec.kernel, progress=lambda m: say(spec.tag, m)) as root:  # sign-file
            from gpualign.ensure import sign  # the signing modules (cryptography, asn1crypto), only to sign

            modules = sign.sign_modules(root.rootfs, spec.kernel, flavour, driver_version, modules, opts.signing,
                                        progress=lambda m: say(spec.tag, m))
        out.seconds["sign"] = time.monotonic() - t0
    t0 = time.monotonic()
    say(spec.tag, f"verify: {len(modules)} modules against {spec.kernel}'s Module.symvers"
                  + (f" and {opts.signing.signer}'s certificate" if opts.signing else ""))
    checked = verify_modules(modules, spec, driver_version, archive, opts.signing)
    out.seconds["verify"] = time.monotonic() - t0
    out.verification = checked.as_dict()
    if not checked.ok and out.modules == "shared":
        from gpualign.ensure import shared

        directory = debian.modules_dir(spec.kernel, opts.flavour, driver_version, None)
        source = shared.pulled_from(directory)
        shared.forget(directory)
        out.shared = f"refused: {source}: {checked.first_problem()}"
        say(spec.tag, f"shared modules from {source} refused by the kernel's checks ({checked.first_problem()}): "
                      "compiling instead")
        import dataclasses

        return _build(spec, dataclasses.replace(opts, share_pull=False), out, say)
    if not checked.ok:
        symbol = checked.first_symbol()
        raise NotVerified(f"{spec.tag}: would not load on {spec.kernel}: {checked.first_problem()}"
                          + (f"; first refused symbol: {symbol}" if symbol and symbol != checked.first_problem()
                             else "")
                          + f" ({checked.mismatches} of {checked.symbols_checked} symbols refused); nothing pushed")
    say(spec.tag, f"verified: {checked.symbols_checked} symbol CRCs, vermagic {spec.kernel}, "
                  f"version {driver_version}" + (f", {len(checked.results)} signatures by {opts.signing.signer} "
                                                 f"(key {opts.signing.describe()['key_id']})"
                                                 if opts.signing else ""))
    if opts.share_push and out.modules in ("compiled", "cache") and opts.flavour in buildroot.FLAVOURS:
        _push_shared(spec, opts, out, say, driver_version, unsigned)
    t0 = time.monotonic()
    record: dict[str, object] = {"symbols": checked.symbols_checked, "modules": len(checked.results)}
    if opts.signing is not None:
        record["signed"] = opts.signing.describe()
    key = image.modules_key(modules)
    variant = f"signed-{opts.signing.describe()['cert_sha256'].replace(':', '')[:12].lower()}" if opts.signing else ""
    local = image.local_image(spec, key, variant)
    if local is not None:
        say(spec.tag, f"image: {local}, assembled before from the same modules")
    else:
        layer = _userspace_layer(spec, opts, out, say, archive, driver_version)
        local = image.assemble(spec, modules, driver_version, record, key, variant, layer)
        say(spec.tag, f"user space: {', '.join(layer.packages)} at NVIDIA {driver_version}: sonames, ld.so.cache "
                      "and nvidia-smi's version checked")
    out.seconds["image"] = time.monotonic() - t0
    t0 = time.monotonic()
    say(spec.tag, f"push: {out.reference}")
    image.push(local, out.reference, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile,
               arch=image.arch_of(spec))
    out.digest = opts.target.digest(spec.tag)
    out.seconds["push"] = time.monotonic() - t0
    if out.digest is None:
        raise image.PushRefused(f"{spec.tag}: pushed, but the ledger does not answer for it")
    out.done = True
    say(spec.tag, f"pushed: {out.digest}")
    return out


def _pull_shared(spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say) -> list[Path] | None:
    """Another build's modules for this kernel, from the registry into the module cache (checked against their
    artifact; the kernel's checks follow as for a compile), or None: none shared, or refused (said, then compiled)."""
    from gpualign.ensure import buildroot, debian, shared
    from gpualign.errors import Unreachable

    t0 = time.monotonic()
    version = opts.archive.for_tag_kernel(spec.os_tag, spec.kernel).target_version(
        buildroot.FLAVOURS[opts.flavour][0])
    if version is None:
        return None  # the build says it, naming the archive
    key = shared.Key(buildroot.upstream(version), spec.kernel, opts.flavour)
    try:
        got = shared.pull(opts.target, key, debian.modules_dir(spec.kernel, opts.flavour, key.version, None))
    except (shared.SharedRefused, Unreachable) as err:
        out.shared = f"refused: {err.message}"
        say(spec.tag, f"shared modules: {err.message}: compiling instead")
        return None
    out.seconds["shared_pull"] = time.monotonic() - t0
    if got is None:
        say(spec.tag, f"shared modules: none at {shared.where(opts.target, key)}")
        return None
    out.shared = "pulled"
    say(spec.tag, f"shared modules: {len(got)} pulled from {shared.where(opts.target, key)} "
                  f"in {out.seconds['shared_pull']:.1f}s (compiled by another build; checked here as if compiled)")
    return got


def _push_shared(spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say, driver_version: str,
                 modules: list[Path]) -> None:
    """Share the verified, unsigned modules (a signature is appended to the bytes the kernel's checks read, so
    the checks of a signed set hold for the unsigned one). A registry that refuses is said, never fatal."""
    from gpualign.ensure import shared
    from gpualign.errors import Unreachable

    key = shared.Key(driver_version, spec.kernel, opts.flavour)
    t0 = time.monotonic()
    try:
        if shared.has(opts.target, key):
            return
        where = shared.push(opts.target, key, modules)
    except Unreachable as err:
        out.shared = f"not pushed: {err.message}"
        say(spec.tag, f"shared modules not pushed ({err.message}): later builds compile them again")
        return
    out.seconds["shared_push"] = time.monotonic() - t0
    out.shared = "pushed"
    say(spec.tag, f"shared modules: pushed to {where} for later builds ({out.seconds['shared_push']:.1f}s)")


def _userspace_layer(spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say, archive: Archive,
                     driver_version: str) -> image_mod.UserSpaceLayer:
    """The user-space image the driver image is made over: local when made or pulled before, else pulled from the
    registry's shared ones (ensure.shared_userspace), else made from Debian's packages and then shared. A registry
    that refuses either way is said, never fatal: the layer is made here."""
    from gpualign.ensure import buildroot, image, shared_userspace, userspace
    from gpualign.errors import Unreachable

    suite, arch = image.suite_of(spec), image.arch_of(spec)
    packages = userspace.wanted(archive, driver_version)
    name = image.userspace_name(suite, arch, driver_version, packages)
    tag = image.userspace_tag(suite, arch, driver_version, packages)
    tls = opts.target.ref.scheme != "http"
    where = shared_userspace.reference(opts.target, tag)
    if image.has_image(name):
        if opts.share_push:
            _share_userspace(spec, opts, say, name, where)
        return image.UserSpaceLayer(name, packages, arch)
    if opts.share_pull:
        t0 = time.monotonic()
        try:
            if shared_userspace.has(opts.target, tag):
                image.pull_userspace(where, name, tls_verify=tls, authfile=opts.authfile)
                out.seconds["userspace_pull"] = time.monotonic() - t0
                say(spec.tag, f"user space: pulled {where} in {out.seconds['userspace_pull']:.1f}s (made by another "
                              "build; checked here as if made here)")
                return image.UserSpaceLayer(name, packages, arch)
        except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
            say(spec.tag, f"user space: {where} not pulled ({err.message}): making it from Debian")
    user = userspace.fetch(archive, driver_version, progress=lambda m: say(spec.tag, m))
    made = image.userspace_image(suite, image.ensure_base(suite, arch), user)
    if opts.share_push:
        _share_userspace(spec, opts, say, made, where)
    return image.UserSpaceLayer(made, packages, arch)


def _share_userspace(spec: tagspec.TagSpec, opts: Options, say: Say, name: str, where: str) -> None:
    """Push the user-space image for later builds, unless the registry has it; a refusal is said, never fatal."""
    from gpualign.ensure import buildroot, image, shared_userspace
    from gpualign.errors import Unreachable

    t0 = time.monotonic()
    try:
        if shared_userspace.has(opts.target, where.rsplit(":", 1)[1]):
            return
        image.push_userspace(name, where, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile)
        say(spec.tag, f"user space: pushed to {where} for later builds ({time.monotonic() - t0:.1f}s)")
    except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
        say(spec.tag, f"user space not shared ({err.message}): later builds make it again")


def _compiled_before(spec: tagspec.TagSpec, opts: Options) -> bool:
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

