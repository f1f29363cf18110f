"""The Debian 12 recipe, run for real: NVIDIA's kernel modules compiled against one kernel's headers.

The compiles run in a build root (`ensure.buildroot`: a bookworm tree with gcc, the kernels' `linux-headers-<kernel>`
and Debian's `nvidia-kernel-source` or `nvidia-open-kernel-source`, the flavour built), side by side, under chroot,
with NVIDIA's own Makefile wrapper (`make modules KERNEL_UNAME=<kernel>`, which sets NV_KERNEL_*); a kernel of
another architecture is compiled across (ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-: NVIDIA's Makefile picks its
binary part by ARCH, kbuild its compiler by CROSS_COMPILE and the gcc version the headers name). The modules are
stripped of debug info and cached by (module source version, kernel, flavour, signing key), so a failed push never
recompiles. Needs root (chroot), as buildah here does.
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

from gpualign.archive.apt import Archive, file_lock
from gpualign.base.errors import BadInput
from gpualign.ensure import buildroot, debug_info
from gpualign.ensure.buildroot import FLAVOURS, BuildError
from gpualign.ensure.compile_log import first_error
from gpualign.loaders.archive_reading import ensure_root

Progress = Callable[[str], None]
_KBUILD_ARCH = {"aarch64-linux-gnu-": "arm64", "x86_64-linux-gnu-": "x86_64"}  # ARCH for NVIDIA's own Makefile


class CompileRefused(BuildError):
    """The compile failed for a cause its log names (NVIDIA's sanity check, a compiler error): the same module source
    and headers fail the same way, so a build Job is not retried until one of them changes."""

    retryable = False


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
            raise BuildError(f"{what}: the disk is full ({ensure_root()}): free space and run again")
        raise BuildError(f"{what} failed (exit {proc.returncode})" + (f": {' | '.join(tail)}" if tail else "")
                         + (f"; log: {log}" if log else ""))
    return usage.ru_utime + usage.ru_stime


def modules_dir(kernel: str, flavour: str, driver_version: str, signing: str | None) -> Path:
    """signing: the signing certificate's SHA-256 (None: the unsigned modules, as compiled)."""
    return ensure_root() / "modules" / driver_version / kernel / flavour / (f"signed-{signing[:16]}" if signing
                                                                          else "unsigned")


def compile_modules(archive: Archive, kernel: str, flavour: str = "proprietary", *, jobs: int = 2,
                    progress: Progress = lambda _m: None, together: tuple[str, ...] = (),
                    on_compile: Callable[[str], None] = lambda _version: None) -> Built:
    """NVIDIA's modules for one kernel, unsigned, from the cache when built before from the same source (signing,
    when asked for, is a step after this one: ensure.sign). The build root is made only for a compile;
    `on_compile` is called with the module source's version as the compile starts (the root made)."""
    if flavour not in FLAVOURS:
        raise BadInput(f"flavour {flavour!r}: expected {' or '.join(FLAVOURS)}")
    package = FLAVOURS[flavour][0]
    cached = cached_modules(archive, kernel, flavour, progress)
    if cached is not None:
        return cached
    # One compile of a kernel's flavour at a time on this machine: two would share one directory of the one build
    # root (and each remove the other's files). A second waits, then takes the first's modules from the cache.
    with file_lock(f"compile-{archive.key}-{kernel}-{flavour}.lock",
                   on_wait=lambda: progress(f"compile: waiting for another build of {kernel}'s {flavour} modules")):
        cached = cached_modules(archive, kernel, flavour, progress)
        if cached is not None:
            return cached
        with buildroot.held(archive, kernel, flavour, together=together, progress=progress) as root:
            version = root.version(package)
            cached = _cached(kernel, flavour, version, progress)  # a root made before the archive moved on
            if cached is not None:
                return cached
            on_compile(version)
            return _compile(root, kernel, flavour, version, jobs, progress, buildroot.cross_prefix(archive))


def cached_modules(archive: Archive, kernel: str, flavour: str = "proprietary",
                   progress: Progress = lambda _m: None) -> Built | None:
    """Modules compiled before for this kernel and flavour: of the source a cached root has, else the newest (found
    offline, without reading the archive: a compile takes the source Debian serves when its root is made)."""
    package = FLAVOURS[flavour][0]
    known = [buildroot.upstream(r.packages[package]) for r in buildroot.roots(archive) if package in r.packages]
    for version in dict.fromkeys([*known, *_compiled_versions(kernel, flavour)]):
        cached = _cached(kernel, flavour, version, progress)
        if cached is not None:
            return cached
    return None


def _compiled_versions(kernel: str, flavour: str) -> list[str]:
    """The module source versions whose unsigned modules for this kernel and flavour are cached, newest first."""
    found = [p.parents[3].name for p in (ensure_root() / "modules").glob(f"*/{kernel}/{flavour}/unsigned/.complete")]
    return sorted(found, key=lambda v: [int(x) if x.isdigit() else -1 for x in v.split(".")], reverse=True)


def _cached(kernel: str, flavour: str, version: str, progress: Progress) -> Built | None:
    out = modules_dir(kernel, flavour, version, None)
    if not (out / ".complete").exists():
        return None
    progress(f"modules: cached ({version}, {kernel}, {flavour})")
    return Built(kernel=kernel, flavour=flavour, driver_version=version, directory=out, compile_seconds=0.0,
                 cached=True)


def _compile(root: buildroot.Root, kernel: str, flavour: str, version: str, jobs: int,
             progress: Progress, cross: str = "") -> Built:
    """cross: CROSS_COMPILE for a kernel of another architecture (aarch64-linux-gnu-), "" for this machine's."""
    _package, tarball, subdir = FLAVOURS[flavour]
    rootfs = root.rootfs
    out = modules_dir(kernel, flavour, version, None)
    across = f" ARCH={_KBUILD_ARCH[cross]} CROSS_COMPILE={cross}" if cross else ""
    across += debug_info.make_flags(buildroot.kernel_config(rootfs, kernel),
                                    (buildroot.headers(rootfs, kernel) / "vmlinux").exists())
    progress(f"compile: NVIDIA {version} {flavour} modules for {kernel} (make -j{jobs}{across}; a few CPU-minutes)")
    work = f"/build/{flavour}-{kernel}"  # kernels compile side by side in the one root
    script = (f"set -e; rm -rf {work}; mkdir -p {work}; cd {work}; tar -xf /usr/src/{tarball}; "
              f"cd modules/{subdir}; make -j{jobs} modules KERNEL_UNAME={kernel}{across}; "
              f"mkdir -p {work}/out; for ko in $(find . -name '*.ko'); do "
              f"{cross}strip --strip-debug -o {work}/out/$(basename $ko) $ko; done")
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.build.log"
    t0 = time.monotonic()
    what = f"compiling {flavour} modules for {kernel}"
    try:
        cpu = _run(["chroot", str(rootfs), "/bin/sh", "-c", script], what, log)
    except BuildError as err:
        cause = first_error(log.read_text(errors="replace").splitlines()) if log.exists() else None
        if cause is None:
            raise
        raise (CompileRefused if cause.permanent else BuildError)(f"{what}: {cause.line}; log: {log}") from err
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
    return Built(kernel=kernel, flavour=flavour, driver_version=version, directory=out, compile_seconds=took,
                 cached=False, compile_cpu_seconds=cpu)
