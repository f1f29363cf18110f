"""One image built, as steps: its modules (given, pulled from the registry's shared ones, cached, or compiled),
signed when a key is given, verified against the tag's kernel, shared, laid over the user space into the image,
and pushed. Each step says what it does and records its seconds in the Outcome.

Shared modules that the kernel's checks refuse are dropped from the cache and the build runs once more without
taking shared ones: it compiles. That is a loop of two attempts, not a recursion.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign import __version__
from gpualign.base.errors import BadInput, Unreachable
from gpualign.ensure import buildroot, compose, debian, image, shared, shared_userspace, userspace
from gpualign.ensure.buildroot import FLAVOURS
from gpualign.ensure.stage import (
    NotVerified,
    Options,
    Outcome,
    Say,
    compiled_before,
    prepare_image_inputs,
    verify_modules,
)
from gpualign.ensure.userspace import LIBS, TOOLS
from gpualign.judging import kmod
from gpualign.model.attestations import Evidence

if TYPE_CHECKING:
    from gpualign.ensure import compose as compose_mod
    from gpualign.ensure import image as image_mod
    from gpualign.judging import tagspec
    from gpualign.judging.verify import Verification


@dataclass(frozen=True)
class Modules:
    files: list[Path]  # what the image gets: signed, when a key is given
    unsigned: list[Path]  # what is shared, once verified
    driver_version: str
    origin: str  # given | compiled | cache | shared


@dataclass(frozen=True)
class Early:
    """The user space's layer for a driver version, got in a thread of its own while the modules are."""

    driver_version: str
    layer: Future[image_mod.UserSpaceLayer]


def build(spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say) -> Outcome:
    """Make, verify and push one image (the caller holds the tag's locks)."""
    early = None
    for attempt in (opts, dataclasses.replace(opts, share_pull=False)):
        steps = Steps(spec, attempt, out, say, early)
        early = steps.early  # a retry waits for the user space the first attempt is getting, never gets it twice
        made = steps.sign(steps.modules())
        checked = steps.verify(made)
        if checked is None:
            continue  # shared modules refused by the kernel's checks: compile instead
        steps.share(made)
        return steps.push(steps.image(made, checked))
    raise NotVerified(f"{spec.tag}: the compiled modules were refused as the shared ones were; nothing pushed")


class Steps:
    def __init__(self, spec: tagspec.TagSpec, opts: Options, out: Outcome, say: Say,
                 early: Early | None = None) -> None:
        self.spec, self.opts, self.out = spec, opts, out
        self.archive = opts.archive.for_tag_kernel(spec.os_tag, spec.kernel)  # its release, its kernel's CPU
        self._say = say
        self.early = early  # the user space's layer, being got beside the modules
        self.started = time.time()  # the build's start, as its provenance says it

    def say(self, message: str) -> None:
        self._say(self.spec.tag, message)

    # -- the modules ---------------------------------------------------------------------------------------------
    def modules(self) -> Modules:
        """Given (--modules-from), or this kernel's: from the cache, the registry's shared ones, or compiled."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        self.say(f"headers: linux-headers-{spec.kernel}")
        if not buildroot.ready(self.archive, spec.kernel) and not compiled_before(spec, opts):
            self.archive.require_headers(spec.kernel)  # a kernel Debian does not serve: refused before anything
        self.out.seconds["headers"] = time.monotonic() - t0
        made = self._given() if opts.modules_from is not None else self._compiled()
        if not made.driver_version.startswith(f"{spec.branch}."):
            raise NotVerified(f"{spec.tag}: the modules are NVIDIA {made.driver_version or '(no version)'}, not "
                              f"branch {spec.branch}; nothing pushed")
        return made

    def _given(self) -> Modules:
        assert self.opts.modules_from is not None
        files = sorted(self.opts.modules_from.glob("*.ko"))
        if not files:
            raise BadInput(f"--modules-from {self.opts.modules_from}: no .ko file there")
        read = [kmod.read_file(p) for p in files]
        version = next((m.field("version") for m in read if m.field("version")), "") or ""
        self.say(f"modules: {len(files)} from {self.opts.modules_from} (not compiled here)")
        self.out.modules = "given"
        return Modules(files, files, version, "given")

    def _compiled(self) -> Modules:
        spec, opts, out, archive = self.spec, self.opts, self.out, self.archive
        if opts.share_pull and not compiled_before(spec, opts):
            self._pull_shared()  # into the module cache, where compile_modules finds them
        built = debian.compile_modules(archive, spec.kernel, opts.flavour, jobs=opts.jobs, progress=self.say,
                                       together=opts.together, on_compile=self._inputs_beside_compile)
        out.seconds["compile"] = built.compile_seconds
        out.seconds["compile_cpu"] = built.compile_cpu_seconds
        if not built.cached:
            self.say(f"compiled: {len(built.modules)} modules in {built.compile_seconds:.0f}s "
                     f"({built.compile_cpu_seconds:.0f} CPU-s)")
        origin = shared.pulled_from(built.directory)
        out.modules = "compiled" if not built.cached else "shared" if origin else "cache"
        return Modules(built.modules, built.modules, built.driver_version, out.modules)

    def _inputs_beside_compile(self, driver_version: str) -> None:
        """As a compile starts: the image's base and user space made beside it, unless the user space's layer is
        already being got (`early`, started with the shared modules' pull)."""
        if self.early is None:
            prepare_image_inputs(self.archive, driver_version)

    def _pull_shared(self) -> None:
        """Another build's modules for this kernel, from the registry into the module cache (checked against their
        artifact; the kernel's checks follow as for a compile); none shared, or refused, is said. The user space's
        layer is got beside them."""
        spec, opts, out = self.spec, self.opts, self.out
        t0 = time.monotonic()
        version = self.archive.target_version(buildroot.FLAVOURS[opts.flavour][0])
        if version is None:
            return  # the build says it, naming the archive
        key = shared.Key(buildroot.upstream(version), spec.kernel, opts.flavour)
        if self.early is None:
            self._start_userspace(key.version)
        into = debian.modules_dir(spec.kernel, opts.flavour, key.version, None)
        taken = opts.ahead.take_modules(key, into) if opts.ahead is not None else None
        if taken is not None and opts.ahead is not None:
            out.shared, out.seconds["shared_pull"] = "pulled", opts.ahead.modules_seconds
            out.ahead.append("modules")
            self.say(f"shared modules: {len(taken)} pulled from {shared.where(opts.target, key)} in "
                     f"{opts.ahead.modules_seconds:.1f}s while Debian's archive was read (waited "
                     f"{time.monotonic() - t0:.1f}s; compiled by another build; checked here as if compiled)")
            return
        try:
            got = shared.pull(opts.target, key, into)
        except (shared.SharedRefused, Unreachable) as err:
            out.shared = f"refused: {err.message}"
            self.say(f"shared modules: {err.message}: compiling instead")
            return
        out.seconds["shared_pull"] = time.monotonic() - t0
        if got is None:
            self.say(f"shared modules: none at {shared.where(opts.target, key)}")
            return
        out.shared = "pulled"
        self.say(f"shared modules: {len(got)} pulled from {shared.where(opts.target, key)} in "
                 f"{out.seconds['shared_pull']:.1f}s (compiled by another build; checked here as if compiled)")

    # -- signing and the kernel's checks -------------------------------------------------------------------------
    def sign(self, made: Modules) -> Modules:
        """With a signing key, every module signed with the kernel's own sign-file; else the modules as they are."""
        opts = self.opts
        if opts.signing is None:
            return made
        t0 = time.monotonic()
        flavour = opts.flavour if opts.modules_from is None else "given-" + image.modules_key(made.files)[:16]
        with buildroot.held(self.archive, self.spec.kernel, progress=self.say) as root:  # its sign-file
            from gpualign.ensure import sign  # the signing modules (cryptography, asn1crypto), only to sign

            files = sign.sign_modules(root.rootfs, self.spec.kernel, flavour, made.driver_version, made.files,
                                      opts.signing, progress=self.say)
        self.out.seconds["sign"] = time.monotonic() - t0
        return dataclasses.replace(made, files=files)

    def verify(self, made: Modules) -> Verification | None:
        """The kernel's checks; None when shared modules were refused (dropped from the cache, said: the caller
        compiles); NotVerified when anything else is."""
        spec, opts, out = self.spec, self.opts, self.out
        t0 = time.monotonic()
        self.say(f"verify: {len(made.files)} modules against {spec.kernel}'s Module.symvers"
                 + (f" and {opts.signing.signer}'s certificate" if opts.signing else ""))
        checked = verify_modules(made.files, spec, made.driver_version, self.archive, opts.signing)
        out.seconds["verify"] = time.monotonic() - t0
        out.verification = checked.as_dict()
        if not checked.ok and made.origin == "shared":
            from gpualign.ensure import debian, shared

            directory = debian.modules_dir(spec.kernel, opts.flavour, made.driver_version, None)
            source = shared.pulled_from(directory)
            shared.forget(directory)
            out.shared = f"refused: {source}: {checked.first_problem()}"
            self.say(f"shared modules from {source} refused by the kernel's checks ({checked.first_problem()}): "
                     "compiling instead")
            return None
        if not checked.ok:
            symbol = checked.first_symbol()
            raise NotVerified(f"{spec.tag}: would not load on {spec.kernel}: {checked.first_problem()}"
                              + (f"; first refused symbol: {symbol}" if symbol and symbol != checked.first_problem()
                                 else "")
                              + f" ({checked.mismatches} of {checked.symbols_checked} symbols refused); nothing "
                                "pushed")
        self.say(f"verified: {checked.symbols_checked} symbol CRCs, vermagic {spec.kernel}, version "
                 f"{made.driver_version}" + (f", {len(checked.results)} signatures by {opts.signing.signer} (key "
                                             f"{opts.signing.describe()['key_id']})" if opts.signing else ""))
        return checked

    # -- sharing -------------------------------------------------------------------------------------------------
    def share(self, made: Modules) -> None:
        """Share the verified, unsigned modules of a compile (a signature is appended to the bytes the kernel's
        checks read, so the checks of a signed set hold for the unsigned one). A refusal is said, never fatal."""
        spec, opts, out = self.spec, self.opts, self.out
        if not opts.share_push or made.origin not in ("compiled", "cache") or opts.flavour not in buildroot.FLAVOURS:
            return
        key = shared.Key(made.driver_version, spec.kernel, opts.flavour)
        t0 = time.monotonic()
        try:
            if shared.has(opts.target, key):
                return
            where = shared.push(opts.target, key, made.unsigned)
        except Unreachable as err:
            out.shared = f"not pushed: {err.message}"
            self.say(f"shared modules not pushed ({err.message}): later builds compile them again")
            return
        out.seconds["shared_push"] = time.monotonic() - t0
        out.shared = "pushed"
        self.say(f"shared modules: pushed to {where} for later builds ({out.seconds['shared_push']:.1f}s)")

    # -- the image -----------------------------------------------------------------------------------------------
    def image(self, made: Modules, checked: Verification) -> str | compose_mod.Composed:
        """The local image (assembled before from the same modules, or now, over the user space), or the image
        composed over the registry's user space, to push."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        if opts.cosign_key is not None:  # what it is made of, for its SBOM and provenance
            self.out.evidence = self._evidence(made, checked)
        record: dict[str, object] = {"symbols": checked.symbols_checked, "modules": len(checked.results)}
        if opts.signing is not None:
            record["signed"] = opts.signing.describe()
        key = image.modules_key(made.files)
        variant = f"signed-{opts.signing.describe()['cert_sha256'].replace(':', '')[:12].lower()}" \
            if opts.signing else ""
        local = image.local_image(spec, key, variant)
        if local is not None:
            self.say(f"image: {local}, assembled before from the same modules")
        else:
            layer = self._layer(made.driver_version)
            if layer.remote is not None:
                composed = compose.compose(spec, layer.remote, layer.packages, made.files, made.driver_version,
                                           record, key)
                self.out.seconds["image"] = time.monotonic() - t0
                self.say(f"image: composed over {layer.remote.reference}: its modules' layer "
                         f"{len(composed.layer.data) / 1e6:.1f} MB, the user space's layers mounted")
                return composed
            local = image.assemble(spec, made.files, made.driver_version, record, key, variant, layer)
            self.say(f"user space: {', '.join(layer.packages)} at NVIDIA {made.driver_version}: sonames, "
                     "ld.so.cache and nvidia-smi's version checked")
        self.out.seconds["image"] = time.monotonic() - t0
        return local

    def _evidence(self, made: Modules, checked: Verification) -> Any:
        import datetime as dt
        import hashlib

        spec, opts = self.spec, self.opts
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        started = dt.datetime.fromtimestamp(self.started, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        return Evidence(
            spec.tag, spec.kernel, spec.branch, made.driver_version, FLAVOURS[opts.flavour][0], made.origin,
            tuple((f.name, hashlib.sha256(f.read_bytes()).hexdigest()) for f in made.files),
            (*LIBS, *TOOLS), __version__, checked.symbols_checked, started, now,
            {"secureBootSigner": opts.signing.signer} if opts.signing is not None else {})

    def _start_userspace(self, driver_version: str) -> None:
        """The user space's layer got beside the modules (pulled, or made from Debian) when they may be shared: with
        no compile to hide it behind, its pull (~2 s) no longer waits for theirs and their verification. Its errors
        are raised where the image needs it."""
        future: Future[image_mod.UserSpaceLayer] = Future()

        def get() -> None:
            try:
                future.set_result(self._userspace_layer(driver_version))
            except BaseException as err:  # raised again by _layer, in the build's own thread
                future.set_exception(err)

        threading.Thread(target=get, name="ensure-userspace", daemon=True).start()
        self.early = Early(driver_version, future)

    def _layer(self, driver_version: str) -> image_mod.UserSpaceLayer:
        if self.early is not None and self.early.driver_version == driver_version:
            return self.early.layer.result()
        return self._userspace_layer(driver_version)

    def _userspace_layer(self, driver_version: str) -> image_mod.UserSpaceLayer:
        """The user-space image the driver image is made over: local when made or pulled before, else pulled from
        the registry's shared ones (ensure.shared_userspace), else made from Debian's packages and then shared. A
        registry that refuses either way is said, never fatal: the layer is made here."""
        spec, opts = self.spec, self.opts
        suite, arch = image.suite_of(spec), image.arch_of(spec)
        packages = userspace.wanted(self.archive, driver_version)
        name = image.userspace_name(suite, arch, driver_version, packages)
        tag = image.userspace_tag(suite, arch, driver_version, packages)
        where = shared_userspace.reference(opts.target, tag)
        if image.has_image(name):
            if opts.share_push:
                self._share_userspace(name, where)
            return image.UserSpaceLayer(name, packages, arch)
        if opts.share_pull:
            from gpualign.ensure import compose

            t0 = time.monotonic()
            if opts.ahead is not None and (remote := opts.ahead.take_userspace(tag)) is not None:
                self.out.seconds["userspace_pull"] = opts.ahead.userspace_seconds
                self.out.ahead.append("userspace")
                self.say(f"user space: {where} fetched and checked in its tree in {opts.ahead.userspace_seconds:.1f}s "
                         f"while Debian's archive was read (waited {time.monotonic() - t0:.1f}s; made by another "
                         "build; the image is composed over it in the registry)")
                return image.UserSpaceLayer("", packages, arch, remote)
            try:
                remote = compose.fetch(opts.target, shared_userspace.repository(opts.target.ref.repo), tag, arch,
                                       driver_version)
                if remote is not None:
                    self.out.seconds["userspace_pull"] = time.monotonic() - t0
                    self.say(f"user space: {where} fetched and checked in its tree in "
                             f"{self.out.seconds['userspace_pull']:.1f}s (made by another build; the image is "
                             "composed over it in the registry)")
                    return image.UserSpaceLayer("", packages, arch, remote)
            except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
                self.say(f"user space: {where} not used ({err.message}): making it from Debian")
        user = userspace.fetch(self.archive, driver_version, progress=self.say)
        made = image.userspace_image(suite, image.ensure_base(suite, arch), user)
        if opts.share_push:
            self._share_userspace(made, where)
        return image.UserSpaceLayer(made, packages, arch)

    def _share_userspace(self, name: str, where: str) -> None:
        """Push the user-space image for later builds, unless the registry has it; a refusal is said, never
        fatal."""
        opts = self.opts
        t0 = time.monotonic()
        try:
            if shared_userspace.has(opts.target, where.rsplit(":", 1)[1]):
                return
            image.push_userspace(name, where, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile)
            from gpualign.ensure.signatures import sign_shared

            signed = sign_shared(opts.target, where.rsplit(":", 1)[1],
                                 shared_userspace.repository(opts.target.ref.repo))
            self.say(f"user space: pushed to {where} for later builds ({time.monotonic() - t0:.1f}s)"
                     + (", signed" if signed else ""))
        except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
            self.say(f"user space not shared ({err.message}): later builds make it again")

    # -- the push ------------------------------------------------------------------------------------------------
    def push(self, made: str | compose_mod.Composed) -> Outcome:
        spec, opts, out = self.spec, self.opts, self.out
        t0 = time.monotonic()
        self.say(f"push: {out.reference}")
        if isinstance(made, str):
            image.push(made, out.reference, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile,
                       arch=image.arch_of(spec))
        else:
            try:
                made.push(opts.target, spec.tag)
            except Unreachable as err:  # a 401 or 403 is a refusal, as buildah's push says it
                raise image.refusal(err.message, "the registry refused the push") or err from None
            finally:
                made.userspace.close()
        out.digest = opts.target.digest(spec.tag)
        out.seconds["push"] = time.monotonic() - t0
        if out.digest is None:
            raise image.PushRefused(f"{spec.tag}: pushed, but the ledger does not answer for it")
        out.done = True
        self.say(f"pushed: {out.digest}")
        return out
