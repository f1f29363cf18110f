"""The Debian 12 recipe, run for real: NVIDIA's kernel modules compiled against one kernel's headers.

The builder stage is a bookworm root made by mmdebstrap (gcc, make, kmod, the kernel's `linux-headers-<kernel>`,
and Debian's `nvidia-kernel-source` or `nvidia-open-kernel-source`: the flavour built), one for every kernel (made
once with the headers of the kernels a run builds, later kernels and flavours added to it), cached; the compiles run
in it, side by side, under chroot (as `buildah run --isolation chroot` would, without needing a container image for
a throw-away stage), with NVIDIA's own Makefile wrapper (`make modules KERNEL_UNAME=<kernel>`, which sets
NV_KERNEL_*). The modules are stripped of debug info and cached by (module source version, kernel, flavour, signing
key), so a failed push never recompiles. Needs root (chroot), as buildah here does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpualign.ensure.archive import Archive, cache_root, file_lock
from gpualign.errors import BadInput, GpualignError

FLAVOURS = {"proprietary": ("nvidia-kernel-source", "nvidia-kernel.tar.xz", "nvidia-kernel"),
            "open": ("nvidia-open-kernel-source", "nvidia-open-kernel.tar.xz", "nvidia-open-kernel")}
BUILD_PACKAGES = ("gcc", "make", "libc6-dev", "kmod", "xz-utils")  # and a flavour's source, when one is built
Progress = Callable[[str], None]


class BuildError(GpualignError):
    """A build step failed (exit 1: the image could not be made; nothing was pushed)."""

    exit_code = 1
    word = "failed"


@dataclass(frozen=True)
class Built:
    kernel: str
    flavour: str
    driver_version: str  # the module source's upstream version, e.g. 535.261.03
    directory: Path  # the stripped .ko files
    compile_seconds: float  # 0 when they came from the cache
    cached: bool
    compile_cpu_seconds: float = 0.0  # user + system CPU of the compile

    @property
    def modules(self) -> list[Path]:
        return sorted(self.directory.glob("*.ko"))


def _run(cmd: list[str], what: str, log: Path | None = None, timeout: float = 3600) -> float:
    """Run a build step; returns the CPU seconds (user + system) it and its descendants used, from the kernel's
    own accounting of the child (wait4), so steps running at once are each measured alone."""
    out = log.open("w") if log else subprocess.DEVNULL
    timer = None
    try:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE)
        except FileNotFoundError:
            raise BadInput(f"{what}: {cmd[0]} is not installed (scripts/install-debs installs it)") from None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        stderr = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if timer is not None:
            timer.cancel()
        if log:
            out.close()  # type: ignore[union-attr]
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log else \
            stderr.decode(errors="replace").strip().splitlines()[-3:]
        if any("No space left on device" in line for line in tail):
            raise BuildError(f"{what}: the disk is full ({cache_root()}): free space and run again")
        raise BuildError(f"{what} failed (exit {proc.returncode})" + (f": {' | '.join(tail)}" if tail else "")
                         + (f"; log: {log}" if log else ""))
    return usage.ru_utime + usage.ru_stime


def builder_root(archive: Archive, kernel: str, progress: Progress = lambda _m: None,
                 together: tuple[str, ...] = (), flavour: str | None = None) -> Path:
    """The bookworm build root, with `kernel`'s headers installed, and the module source of `flavour` when one is
    given (cached; one root for every kernel, made atomically: a half-made root is never used). Made for the first
    time, it gets the headers of the kernels in `together` too (the other kernels of this run), in one mmdebstrap;
    a kernel or a flavour's source that comes later is added to it with apt-get in the root. Only the flavour asked
    for is installed: the other's source is 30-45 MB more to download before the first compile can start."""
    with file_lock(f"root-{archive.suite}.lock"):
        return _builder_root(archive, kernel, progress, together, flavour)


def _root(archive: Archive) -> Path:
    return cache_root() / "roots" / archive.suite


def root_ready(archive: Archive, kernel: str) -> bool:
    """The build root is cached with the kernel's headers installed in it."""
    root = _root(archive)
    return (root / ".complete").exists() and (root / ".kernels" / kernel).exists()


def _has_source(root: Path, flavour: str) -> bool:
    """The flavour's module source is in the root (a root made before sources were installed per flavour had both:
    dpkg in the root says so, and the marker is written then)."""
    if (root / ".sources" / flavour).exists():
        return True
    installed = subprocess.run(["chroot", str(root / "rootfs"), "dpkg-query", "-W", "-f=${Status}",
                                FLAVOURS[flavour][0]], capture_output=True, text=True)
    if installed.returncode == 0 and installed.stdout.endswith(" installed"):
        (root / ".sources").mkdir(exist_ok=True)
        (root / ".sources" / flavour).write_text(FLAVOURS[flavour][0] + "\n")
        return True
    return False


def _add_to_root(root: Path, packages: list[str], what: str, log: Path, progress: Progress) -> None:
    rootfs = root / "rootfs"
    progress(f"build root: adding {', '.join(packages)}")
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")  # apt in the root resolves names
    _run(["chroot", str(rootfs), "/bin/sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
          f"apt-get install -y -qq --no-install-recommends {' '.join(packages)}"], f"adding {what} to the build root",
         log)


def _builder_root(archive: Archive, kernel: str, progress: Progress, together: tuple[str, ...],
                  flavour: str | None) -> Path:
    root = _root(archive)
    rootfs = root / "rootfs"
    if (root / ".complete").exists():
        if not (root / ".kernels" / kernel).exists():
            headers = archive.require_headers(kernel)
            _add_to_root(root, [headers], headers, root / f"add-{kernel}.log", progress)
            (root / ".kernels" / kernel).write_text(headers + "\n")
        if flavour is not None and not _has_source(root, flavour):
            source = FLAVOURS[flavour][0]
            _add_to_root(root, [source], source, root / f"add-{source}.log", progress)
            (root / ".sources").mkdir(exist_ok=True)
            (root / ".sources" / flavour).write_text(source + "\n")
        return rootfs
    kernels = list(dict.fromkeys((kernel, *together)))
    packages = [archive.require_headers(k) for k in kernels]
    sources = [FLAVOURS[flavour][0]] if flavour is not None else []
    if os.geteuid() != 0:
        raise BadInput("building driver modules needs root (mmdebstrap and chroot), as buildah does here")
    root.parent.mkdir(parents=True, exist_ok=True)
    progress(f"build root: mmdebstrap {archive.suite} with {', '.join((*packages, *sources))}")
    with tempfile.TemporaryDirectory(prefix=f"{root.name}.", dir=root.parent) as tmp:
        staging = Path(tmp) / "root"
        staging.mkdir()
        _run(["mmdebstrap", "--quiet", "--variant=apt", "--components=main,contrib,non-free,non-free-firmware",
              f"--include={','.join((*BUILD_PACKAGES, *packages, *sources))}", archive.suite,
              str(staging / "rootfs"), *archive.source_lines()], f"mmdebstrap for {', '.join(kernels)}",
             Path(tmp) / "mmdebstrap.log")
        (staging / ".kernels").mkdir()
        for k, h in zip(kernels, packages, strict=True):
            (staging / ".kernels" / k).write_text(h + "\n")
        (staging / ".sources").mkdir()
        for source in sources:
            assert flavour is not None
            (staging / ".sources" / flavour).write_text(source + "\n")
        (staging / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staging, root)
    for old in root.parent.glob(f"{archive.suite}-*"):  # one root per kernel, as gpualign kept them before
        if (old / ".complete").exists():
            shutil.rmtree(old, ignore_errors=True)
    return rootfs


def _installed_version(rootfs: Path, package: str) -> str:
    try:
        res = subprocess.run(["chroot", str(rootfs), "dpkg-query", "-W", "-f=${Version}", package],
                             capture_output=True, text=True)
    except FileNotFoundError:
        raise BadInput("chroot is not installed (coreutils): the modules are compiled in a chroot") from None
    if res.returncode != 0 or not res.stdout:
        raise BuildError(f"{package} is not installed in the build root {rootfs}")
    return res.stdout.split("-", 1)[0].split("+", 1)[0]


def modules_dir(kernel: str, flavour: str, driver_version: str, signing: str | None) -> Path:
    """signing: the signing certificate's SHA-256 (None: the unsigned modules, as compiled)."""
    return cache_root() / "modules" / driver_version / kernel / flavour / (f"signed-{signing[:16]}" if signing
                                                                          else "unsigned")


def compile_modules(archive: Archive, kernel: str, flavour: str = "proprietary", *, jobs: int = 2,
                    progress: Progress = lambda _m: None, together: tuple[str, ...] = ()) -> Built:
    """NVIDIA's modules for one kernel, unsigned, from the cache when built before from the same source (signing,
    when asked for, is a step after this one: ensure.sign)."""
    if flavour not in FLAVOURS:
        raise BadInput(f"flavour {flavour!r}: expected {' or '.join(FLAVOURS)}")
    package, tarball, subdir = FLAVOURS[flavour]
    rootfs = builder_root(archive, kernel, progress, together, flavour)
    version = _installed_version(rootfs, package)
    out = modules_dir(kernel, flavour, version, None)
    if (out / ".complete").exists():
        progress(f"modules: cached ({version}, {kernel}, {flavour})")
        return Built(kernel, flavour, version, out, 0.0, True)
    progress(f"compile: NVIDIA {version} {flavour} modules for {kernel} (make -j{jobs}; a few CPU-minutes)")
    work = f"/build/{flavour}-{kernel}"  # kernels compile side by side in the one root
    script = (f"set -e; rm -rf {work}; mkdir -p {work}; cd {work}; tar -xf /usr/src/{tarball}; "
              f"cd modules/{subdir}; make -j{jobs} modules KERNEL_UNAME={kernel}; "
              f"mkdir -p {work}/out; for ko in $(find . -name '*.ko'); do "
              f"strip --strip-debug -o {work}/out/$(basename $ko) $ko; done")
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.build.log"
    t0 = time.monotonic()
    cpu = _run(["chroot", str(rootfs), "/bin/sh", "-c", script], f"compiling {flavour} modules for {kernel}", log)
    took = time.monotonic() - t0
    staging = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))
    for ko in (rootfs / work.lstrip("/") / "out").glob("*.ko"):
        shutil.copy2(ko, staging / ko.name)
    if not list(staging.glob("*.ko")):
        shutil.rmtree(staging)
        raise BuildError(f"compiling {flavour} modules for {kernel} produced no .ko; log: {log}")
    (staging / ".complete").write_text(f"{took:.1f}\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    shutil.rmtree(rootfs / work.lstrip("/"), ignore_errors=True)
    return Built(kernel, flavour, version, out, took, False, cpu)
