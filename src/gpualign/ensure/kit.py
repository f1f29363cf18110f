"""What a build works with, taken as parameters: the compiler, the verifier, the image's path and the mirror. The
archive and the registry are the run's own (`Options.archive`, `Options.target`). `Kit()` is the real one, of
Debian's build roots, the kernel's load checks, buildah and skopeo; tests give fakes, so that the pipeline's
branches (shared modules refused and compiled again, a refused compile, a refused share, the lock that finds the tag
made meanwhile, the mirror) run without root and without a compile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpualign.archive.apt import Archive
from gpualign.ensure import buildroot, debian, mirror
from gpualign.ensure.assembly import Assembly
from gpualign.ensure.compose import Composed
from gpualign.ensure.debian import Built
from gpualign.ensure.outcome import Emit
from gpualign.ensure.stage import Modules, Options, verify_modules
from gpualign.judging.verify import Verification
from gpualign.ledger.references import RegistryRef
from gpualign.model.driver_tag import TagSpec

if TYPE_CHECKING:  # the signing modules (cryptography, asn1crypto) load only to sign
    from gpualign.ensure.sign import SigningKey

Progress = Callable[[str], None]


class Compiler(Protocol):
    def ready(self, archive: Archive, kernel: str) -> bool:
        """A build root with the kernel's headers is at hand (the archive is not asked for them)."""

    def cached(self, archive: Archive, kernel: str, flavour: str) -> bool:
        """The modules for this kernel and flavour were compiled before."""

    def compile(self, archive: Archive, kernel: str, flavour: str, *, jobs: int, progress: Progress,
                together: tuple[str, ...], on_compile: Callable[[str], None]) -> Built:
        """The kernel's modules: from the module cache (where shared modules are pulled into), or compiled."""


class DebianCompiler:
    """NVIDIA's module source from Debian's archive, compiled in a build root of the kernel's headers."""

    def ready(self, archive: Archive, kernel: str) -> bool:
        return buildroot.ready(archive, kernel)

    def cached(self, archive: Archive, kernel: str, flavour: str) -> bool:
        return debian.cached_modules(archive, kernel, flavour) is not None

    def compile(self, archive: Archive, kernel: str, flavour: str, *, jobs: int, progress: Progress,
                together: tuple[str, ...], on_compile: Callable[[str], None]) -> Built:
        return debian.compile_modules(archive, kernel, flavour, jobs=jobs, progress=progress, together=together,
                                      on_compile=on_compile)


def compiled_before(spec: TagSpec, opts: Options, compiler: Compiler | None = None) -> bool:
    """The modules for this tag are cached: a run needs neither the archive nor a build root for them."""
    return opts.modules_from is None and opts.flavour in buildroot.FLAVOURS and \
        (compiler or DebianCompiler()).cached(opts.archive.for_tag_kernel(spec.os_tag, spec.kernel), spec.kernel,
                                             opts.flavour)


class ImagePath(Protocol):
    """The image's path once the modules are verified (ensure.assembly.Assembly)."""

    @property
    def getting_userspace(self) -> bool:
        """The user space's layer is being got already."""

    def start_userspace(self, driver_version: str) -> None:
        """Get the user space's layer in the background."""

    def image(self, made: Modules, checked: Verification) -> str | Composed:
        """The image to push."""

    def push(self, made: str | Composed) -> str:
        """Push it under the tag: the digest the ledger answers."""


Verifier = Callable[[list[Path], TagSpec, str, Archive, "SigningKey | None"], Verification]
ImagePaths = Callable[[TagSpec, Options, Archive, Emit, Progress], ImagePath]
Mirror = Callable[[RegistryRef, RegistryRef, str, str, "str | None"], None]


# (image, the tag's kernel, its CPU architecture, the credentials file, the module check: auto or strict) -> why it
# cannot be vouched for, or None (gpualign.judging.judge.unvouched)
Vouch = Callable[[str, str, str, "str | None", str], "str | None"]


def _judged(image: str, kernel: str, arch: str, authfile: str | None, modules: str) -> str | None:
    from gpualign.judging.judge import unvouched

    return unvouched(image, kernel, docker_config=Path(authfile) if authfile else None, modules=modules,
                     archs=(arch,))


# (the image's module files, the kernel release, certificates to boot under Secure Boot trusting: none, no Secure
# Boot) -> the kernel's verdict, once booted (gpualign.judging.kernel_boot)
KernelLoader = Callable[[list[Path], str, tuple[bytes, ...]], Any]


# the kernel release -> nothing; its package (and a foreign architecture's busybox) got and unpacked, beside the
# compile, so the boot after it waits for nothing it could have had before
KernelPrepare = Callable[[str], None]


def _prepare_kernel(kernel: str) -> None:
    import threading

    from gpualign.judging.kernel_boot import busybox_for, kernel_tree, kernels_cache
    from gpualign.model.kernels import Kernel

    def fetch() -> None:
        try:
            kernel_tree(kernel, kernels_cache())
            busybox_for(Kernel.of(kernel).arch_or_amd64, kernel, kernels_cache())
        except Exception:  # noqa: BLE001 - the boot itself reads them again and says what failed
            pass

    threading.Thread(target=fetch, name=f"kernel-{kernel}", daemon=True).start()


def _boot(files: list[Path], kernel: str, trust: tuple[bytes, ...] = ()) -> Any:
    import shutil
    import tempfile

    from gpualign.judging.kernel_boot import boot_and_load, kernels_cache

    with tempfile.TemporaryDirectory(prefix="gpualign-load-") as tmp:
        for f in files:  # the files under their module names, as the image holds them
            shutil.copyfile(f, Path(tmp) / f.name)
        return boot_and_load(Path(tmp), kernel, kernels_cache(), trust=trust)


def _skopeo(source: RegistryRef, target: RegistryRef, tag: str, digest: str, authfile: str | None) -> None:
    mirror.copy(source, target, tag, digest, authfile=authfile)


@dataclass(frozen=True)
class Kit:
    compiler: Compiler = field(default_factory=DebianCompiler)
    verifier: Verifier = verify_modules
    images: ImagePaths = Assembly
    mirror: Mirror = _skopeo
    vouch: Vouch = _judged  # what a mirror's upstream image must pass before it is copied (and so signed)
    kernel_load: KernelLoader = _boot  # the modules loaded into their own kernel, booted, before the push
    kernel_prepare: KernelPrepare = _prepare_kernel  # what that boot needs, got beside the compile
