"""One image built, as steps: its modules (given, pulled from the registry's shared ones, cached, or compiled),
signed when a key is given, verified against the tag's kernel, shared, laid over the user space into the image
(ensure.assembly), and pushed. Each step says what it does, for people, and emits what it learnt as events
(ensure.outcome), for the record. The compiler, the verifier and the image's path are the kit's (ensure.kit).

Shared modules that the kernel's checks refuse are dropped from the cache and the build runs once more without
taking shared ones: it compiles. That is a loop of two attempts, not a recursion.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from gpualign.archive.apt import Archive
from gpualign.base.errors import Unreachable
from gpualign.ensure import buildroot, debian, image, shared
from gpualign.ensure.kit import ImagePath, Kit, compiled_before
from gpualign.ensure.outcome import (
    Emit,
    FetchedAhead,
    KernelLoaded,
    ModuleOrigin,
    ModulesTaken,
    Pushed,
    Shared,
    SharedState,
    Timed,
    Verified,
)
from gpualign.ensure.refusals import NoModulesGiven
from gpualign.ensure.stage import Modules, NotVerified, Options, Say, prepare_image_inputs
from gpualign.judging import kmod
from gpualign.judging.verify import Verification
from gpualign.model.driver_tag import TagSpec


def build(spec: TagSpec, opts: Options, emit: Emit, say: Say, kit: Kit | None = None) -> None:
    """Make, verify and push one image (the caller holds the tag's locks); the digest is the `Pushed` event's."""
    kit = kit or Kit()
    archive = opts.archive.for_tag_kernel(spec.os_tag, spec.kernel)  # its release, its kernel's CPU
    if opts.kernel_load:
        kit.kernel_prepare(spec.kernel)  # the kernel's own package, got while the modules are made
    images = kit.images(spec, opts, archive, emit, lambda message: say(spec.tag, message))
    for attempt in (opts, dataclasses.replace(opts, share_pull=False)):
        steps = Steps(spec=spec, opts=attempt, archive=archive, emit=emit, say=say, kit=kit, images=images)
        made = steps.sign(steps.modules())
        checked = steps.verify(made)
        if checked is None:
            continue  # shared modules refused by the kernel's checks: compile instead
        made = dataclasses.replace(made, kernel_load=steps.kernel_load(made))
        with ThreadPoolExecutor(1, thread_name_prefix="share") as beside:  # the shared modules beside the image
            sharing = beside.submit(steps.share, made)
            emit(Pushed(images.push(images.image(made, checked))))
            sharing.result()  # never fatal: a refusal is said
        return
    raise NotVerified(f"{spec.tag}: the compiled modules were refused as the shared ones were; nothing pushed")


class Steps:
    def __init__(self, spec: TagSpec, opts: Options, archive: Archive, emit: Emit, say: Say, kit: Kit,
                 images: ImagePath) -> None:
        self.spec, self.opts, self.archive, self.emit, self.kit, self.images = spec, opts, archive, emit, kit, images
        self._say = say

    def say(self, message: str) -> None:
        self._say(self.spec.tag, message)

    def _compiled_before(self) -> bool:
        return compiled_before(self.spec, self.opts, self.kit.compiler)

    # -- the modules ---------------------------------------------------------------------------------------------
    def modules(self) -> Modules:
        """Given (--modules-from), or this kernel's: from the cache, the registry's shared ones, or compiled."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        self.say(f"headers: linux-headers-{spec.kernel}")
        if not self.kit.compiler.ready(self.archive, spec.kernel) and not self._compiled_before():
            self.archive.require_headers(spec.kernel)  # a kernel Debian does not serve: refused before anything
        self.emit(Timed("headers", time.monotonic() - t0))
        made = self._given() if opts.modules_from is not None else self._compiled()
        if not made.driver_version.startswith(f"{spec.branch}."):
            raise NotVerified(f"{spec.tag}: the modules are NVIDIA {made.driver_version or '(no version)'}, not "
                              f"branch {spec.branch}; nothing pushed")
        return made

    def _given(self) -> Modules:
        assert self.opts.modules_from is not None
        files = sorted(self.opts.modules_from.glob("*.ko"))
        if not files:
            raise NoModulesGiven(self.opts.modules_from)
        read = [kmod.read_file(p) for p in files]
        version = next((m.field("version") for m in read if m.field("version")), "") or ""
        self.say(f"modules: {len(files)} from {self.opts.modules_from} (not compiled here)")
        self.emit(ModulesTaken(ModuleOrigin.GIVEN))
        return Modules(files, files, version, ModuleOrigin.GIVEN)

    def _compiled(self) -> Modules:
        spec, opts = self.spec, self.opts
        if opts.share_pull and not self._compiled_before():
            self._pull_shared()  # into the module cache, where the compile finds them
        built = self.kit.compiler.compile(self.archive, spec.kernel, opts.flavour, jobs=opts.jobs,
                                          progress=self.say, together=opts.together,
                                          on_compile=self._inputs_beside_compile)
        self.emit(Timed("compile", built.compile_seconds))
        self.emit(Timed("compile_cpu", built.compile_cpu_seconds))
        if not built.cached:
            self.say(f"compiled: {len(built.modules)} modules in {built.compile_seconds:.0f}s "
                     f"({built.compile_cpu_seconds:.0f} CPU-s)")
        origin = ModuleOrigin.COMPILED if not built.cached else \
            ModuleOrigin.SHARED if shared.pulled_from(built.directory) else ModuleOrigin.CACHE
        self.emit(ModulesTaken(origin))
        return Modules(built.modules, built.modules, built.driver_version, origin)

    def _inputs_beside_compile(self, driver_version: str) -> None:
        """As a compile starts: the image's base and user space made beside it, unless the user space's layer is
        already being got (started with the shared modules' pull)."""
        if not self.images.getting_userspace:
            prepare_image_inputs(self.archive, driver_version)

    def _pull_shared(self) -> None:
        """Another build's modules for this kernel, from the registry into the module cache (checked against their
        artifact; the kernel's checks follow as for a compile); none shared, or refused, is said. The user space's
        layer is got beside them."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        version = self.archive.target_version(buildroot.FLAVOURS[opts.flavour][0])
        if version is None:
            return  # the build says it, naming the archive
        key = shared.Key(buildroot.upstream(version), spec.kernel, opts.flavour)
        self.images.start_userspace(key.version)
        into = debian.modules_dir(spec.kernel, opts.flavour, key.version, None)
        taken = opts.ahead.take_modules(key, into) if opts.ahead is not None else None
        if taken is not None and opts.ahead is not None:
            self.emit(Shared(SharedState.PULLED))
            self.emit(Timed("shared_pull", opts.ahead.modules_seconds))
            self.emit(FetchedAhead("modules"))
            self.say(f"shared modules: {len(taken)} pulled from {shared.where(opts.target, key)} in "
                     f"{opts.ahead.modules_seconds:.1f}s while Debian's archive was read (waited "
                     f"{time.monotonic() - t0:.1f}s; compiled by another build; checked here as if compiled)")
            return
        try:
            got = shared.pull(opts.target, key, into, opts.trusted)
        except (shared.SharedRefused, Unreachable) as err:
            self.emit(Shared(SharedState.REFUSED, err.message))
            self.say(f"shared modules: {err.message}: compiling instead")
            return
        pulled = time.monotonic() - t0
        self.emit(Timed("shared_pull", pulled))
        if got is None:
            self.say(f"shared modules: none at {shared.where(opts.target, key)}")
            return
        self.emit(Shared(SharedState.PULLED))
        self.say(f"shared modules: {len(got)} pulled from {shared.where(opts.target, key)} in "
                 f"{pulled:.1f}s (compiled by another build; checked here as if compiled)")

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
        self.emit(Timed("sign", time.monotonic() - t0))
        return dataclasses.replace(made, files=files)

    def verify(self, made: Modules) -> Verification | None:
        """The kernel's checks; None when shared modules were refused (dropped from the cache, said: the caller
        compiles); NotVerified when anything else is."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        self.say(f"verify: {len(made.files)} modules against {spec.kernel}'s Module.symvers"
                 + (f" and {opts.signing.signer}'s certificate" if opts.signing else ""))
        checked = self.kit.verifier(made.files, spec, made.driver_version, self.archive, opts.signing)
        self.emit(Timed("verify", time.monotonic() - t0))
        self.emit(Verified(checked.as_dict()))
        if not checked.ok and made.origin == ModuleOrigin.SHARED:
            directory = debian.modules_dir(spec.kernel, opts.flavour, made.driver_version, None)
            source = shared.pulled_from(directory)
            shared.forget(directory)
            self.emit(Shared(SharedState.REFUSED, f"{source}: {checked.first_problem()}"))
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

    def kernel_load(self, made: Modules) -> dict[str, Any]:
        """The kernel decides: the modules loaded into their own kernel, booted in a VM (amd64 and arm64, each under
        its own emulator; the check can be switched off, which is said, and the report's kernel_load names it).
        Refused: NotVerified, nothing pushed."""
        spec, opts = self.spec, self.opts
        if not opts.kernel_load:
            why = "switched off for this run"
            self.say(f"kernel load: skipped: {why}; the offline checks above vouch for the modules")
            skipped = {"kernel": spec.kernel, "verdict": "skipped", "why": why}
            self.emit(KernelLoaded(skipped))
            return skipped
        t0 = time.monotonic()
        trust = (opts.signing.cert.public_bytes(Encoding.DER),) if opts.signing else ()
        self.say(f"kernel load: booting Debian's {spec.kernel} in a VM and loading the modules (about 10 s for "
                 "amd64, 20 s for arm64" + (f"; under Secure Boot trusting {opts.signing.signer}, a few seconds "
                                           "more" if opts.signing else "") + ")")
        verdict = self.kit.kernel_load(made.files, spec.kernel, trust)
        self.emit(Timed("kernel_load", time.monotonic() - t0))
        self.emit(KernelLoaded(verdict.as_dict()))
        if not verdict.ok:
            raise NotVerified(f"{spec.tag}: {verdict.line()}; nothing pushed")
        self.say(verdict.line())
        record = verdict.as_dict()
        return {k: record[k] for k in ("kernel", "verdict", "said", "seconds", "accel", "secure_boot")}

    # -- sharing -------------------------------------------------------------------------------------------------
    def share(self, made: Modules) -> None:
        """Share the verified, unsigned modules of a compile (a signature is appended to the bytes the kernel's
        checks read, so the checks of a signed set hold for the unsigned one). A refusal is said, never fatal."""
        spec, opts = self.spec, self.opts
        if not opts.share_push or made.origin not in (ModuleOrigin.COMPILED, ModuleOrigin.CACHE) or \
                opts.flavour not in buildroot.FLAVOURS:
            return
        key = shared.Key(made.driver_version, spec.kernel, opts.flavour)
        t0 = time.monotonic()
        try:
            if shared.has(opts.target, key):
                return
            where = shared.push(opts.target, key, made.unsigned, opts.cosign_key)
        except Unreachable as err:
            self.emit(Shared(SharedState.NOT_PUSHED, err.message))
            self.say(f"shared modules not pushed ({err.message}): later builds compile them again")
            return
        pushed = time.monotonic() - t0
        self.emit(Timed("shared_push", pushed))
        self.emit(Shared(SharedState.PUSHED))
        self.say(f"shared modules: pushed to {where} for later builds ({pushed:.1f}s)")
