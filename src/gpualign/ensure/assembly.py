"""The image's path of a build, once its modules are verified: the user space it is laid over (local, the
registry's shared one, or made from Debian and shared), the image assembled with buildah or composed over the
registry's user space, what it is made of (for its SBOM and provenance), and the push. A build takes it as a
collaborator (ensure.kit), so the build's steps are tested without buildah."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from gpualign import __version__
from gpualign.archive.apt import Archive
from gpualign.base.errors import Unreachable
from gpualign.ensure import buildroot, compose, image, shared_userspace, userspace
from gpualign.ensure.buildroot import FLAVOURS
from gpualign.ensure.image import UserSpaceLayer
from gpualign.ensure.outcome import Emit, FetchedAhead, MadeFrom, Timed
from gpualign.ensure.signatures import sign_shared
from gpualign.ensure.stage import Modules, Options
from gpualign.ensure.userspace import LIBS, TOOLS
from gpualign.judging.verify import Verification
from gpualign.model.attestations import Evidence
from gpualign.model.driver_tag import TagSpec


@dataclass(frozen=True)
class Early:
    """The user space's layer for a driver version, got in a thread of its own while the modules are."""

    driver_version: str
    layer: Future[UserSpaceLayer]


class Assembly:
    """One tag's image, over the user space, to the ledger. Lives across a build's attempts: a retry waits for the
    user space the first attempt started getting, never gets it twice."""

    def __init__(self, spec: TagSpec, opts: Options, archive: Archive, emit: Emit,
                 say: Callable[[str], None]) -> None:
        self.spec, self.opts, self.archive, self.emit, self.say = spec, opts, archive, emit, say
        self.early: Early | None = None  # the user space's layer, being got beside the modules
        self.started = time.time()  # the build's start, as its provenance says it

    @property
    def getting_userspace(self) -> bool:
        return self.early is not None

    def image(self, made: Modules, checked: Verification) -> str | compose.Composed:
        """The local image (assembled before from the same modules, or now, over the user space), or the image
        composed over the registry's user space, to push."""
        spec, opts = self.spec, self.opts
        t0 = time.monotonic()
        if opts.cosign_key is not None:  # what it is made of, for its SBOM and provenance
            self.emit(MadeFrom(self._evidence(made, checked)))
        record: dict[str, object] = {"symbols": checked.symbols_checked, "modules": len(checked.results)}
        if opts.signing is not None:
            record["signed"] = opts.signing.describe()
        if made.kernel_load is not None:  # the booted kernel's verdict, in the image's own labels
            record["kernel_load"] = made.kernel_load
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
                self.emit(Timed("image", time.monotonic() - t0))
                self.say(f"image: composed over {layer.remote.reference}: its modules' layer "
                         f"{len(composed.layer.data) / 1e6:.1f} MB, the user space's layers mounted")
                return composed
            local = image.assemble(spec, made.files, made.driver_version, record, key, variant, layer)
            self.say(f"user space: {', '.join(layer.packages)} at NVIDIA {made.driver_version}: sonames, "
                     "ld.so.cache and nvidia-smi's version checked")
        self.emit(Timed("image", time.monotonic() - t0))
        return local

    def _evidence(self, made: Modules, checked: Verification) -> Evidence:
        spec, opts = self.spec, self.opts
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        started = dt.datetime.fromtimestamp(self.started, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        return Evidence(
            tag=spec.tag, kernel=spec.kernel, branch=spec.branch, driver_version=made.driver_version,
            module_source=FLAVOURS[opts.flavour][0], modules_from=made.origin,
            modules=tuple((f.name, hashlib.sha256(f.read_bytes()).hexdigest()) for f in made.files),
            userspace=(*LIBS, *TOOLS), builder=__version__, symbols_checked=checked.symbols_checked, started=started,
            finished=now,
            extra={**({"secureBootSigner": opts.signing.signer} if opts.signing is not None else {}),
                   **({"kernelLoad": made.kernel_load} if made.kernel_load is not None else {})})

    def start_userspace(self, driver_version: str) -> None:
        """The user space's layer got beside the modules (pulled, or made from Debian) when they may be shared: with
        no compile to hide it behind, its pull (~2 s) no longer waits for theirs and their verification. Its errors
        are raised where the image needs it. Started once: a retry waits for the same layer."""
        if self.early is not None:
            return
        future: Future[UserSpaceLayer] = Future()

        def get() -> None:
            try:
                future.set_result(self._userspace_layer(driver_version))
            except BaseException as err:  # raised again by _layer, in the build's own thread
                future.set_exception(err)

        threading.Thread(target=get, name="ensure-userspace", daemon=True).start()
        self.early = Early(driver_version, future)

    def _layer(self, driver_version: str) -> UserSpaceLayer:
        if self.early is not None and self.early.driver_version == driver_version:
            return self.early.layer.result()
        return self._userspace_layer(driver_version)

    def _userspace_layer(self, driver_version: str) -> UserSpaceLayer:
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
                self._share_userspace(name, tag, where)
            return image.UserSpaceLayer(name, packages, arch)
        if opts.share_pull:
            t0 = time.monotonic()
            if opts.ahead is not None and (remote := opts.ahead.take_userspace(tag)) is not None:
                self.emit(Timed("userspace_pull", opts.ahead.userspace_seconds))
                self.emit(FetchedAhead("userspace"))
                self.say(f"user space: {where} fetched and checked in its tree in {opts.ahead.userspace_seconds:.1f}s "
                         f"while Debian's archive was read (waited {time.monotonic() - t0:.1f}s; made by another "
                         "build; the image is composed over it in the registry)")
                return image.UserSpaceLayer("", packages, arch, remote)
            try:
                remote = compose.fetch(opts.target, shared_userspace.repository(opts.target.ref.repo), tag, arch,
                                       driver_version, opts.trusted)
                if remote is not None:
                    pulled = time.monotonic() - t0
                    self.emit(Timed("userspace_pull", pulled))
                    self.say(f"user space: {where} fetched and checked in its tree in "
                             f"{pulled:.1f}s (made by another build; the image is "
                             "composed over it in the registry)")
                    return image.UserSpaceLayer("", packages, arch, remote)
            except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
                self.say(f"user space: {where} not used ({err.message}): making it from Debian")
        user = userspace.fetch(self.archive, driver_version, progress=self.say)
        made = image.userspace_image(suite, image.ensure_base(suite, arch), user)
        if opts.share_push:
            self._share_userspace(made, tag, where)
        return image.UserSpaceLayer(made, packages, arch)

    def _share_userspace(self, name: str, tag: str, where: str) -> None:
        """Push the user-space image for later builds, unless the registry has it; a refusal is said, never
        fatal."""
        opts = self.opts
        t0 = time.monotonic()
        try:
            if shared_userspace.has(opts.target, tag):
                return
            image.push_userspace(name, where, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile)
            signed = sign_shared(opts.target, tag, shared_userspace.repository(opts.target.ref.repo), opts.cosign_key)
            self.say(f"user space: pushed to {where} for later builds ({time.monotonic() - t0:.1f}s)"
                     + (", signed" if signed else ""))
        except (Unreachable, image.PushRefused, buildroot.BuildError) as err:
            self.say(f"user space not shared ({err.message}): later builds make it again")

    # -- the push ------------------------------------------------------------------------------------------------
    def push(self, made: str | compose.Composed) -> str:
        """Push the image under its tag: the digest the ledger answers for it."""
        spec, opts = self.spec, self.opts
        reference = f"{opts.target.ref.image}:{spec.tag}"
        t0 = time.monotonic()
        self.say(f"push: {reference}")
        if isinstance(made, str):
            image.push(made, reference, tls_verify=opts.target.ref.scheme != "http", authfile=opts.authfile,
                       arch=image.arch_of(spec))
        else:
            try:
                made.push(opts.target, spec.tag)
            except Unreachable as err:  # a 401 or 403 is a refusal, as buildah's push says it
                raise image.refusal(err.message, "the registry refused the push") or err from None
            finally:
                made.userspace.close()
        digest = opts.target.digest(spec.tag)
        self.emit(Timed("push", time.monotonic() - t0))
        if digest is None:
            raise image.PushRefused(f"{spec.tag}: pushed, but the ledger does not answer for it")
        self.say(f"pushed: {digest}")
        return digest
