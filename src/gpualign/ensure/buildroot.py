"""The build root: a bookworm tree holding a compiler, kernels' headers and NVIDIA's module source, in which the
modules are compiled under chroot (as `buildah run --isolation chroot` would, without a container image for a
throw-away stage).

It is made by mmdebstrap's `extract` variant: the compile's tools are unpacked, not installed. The root is a
compile's tools and inputs, never a system that boots or upgrades, so no maintainer script needs to run; the two
things those scripts would do that a compile needs (the `awk` and `cc` alternatives) are made here. dpkg's per-file
work (unpacking ~43,000 files to `.dpkg-new`, fsyncing and renaming each) was most of the root's cost and the
longest step before the first compile could start. The tools are the shell utilities, the compiler the kernels'
headers name, kbuild's host programs and the headers' common part (what the headers depend on to compile). The
headers and NVIDIA's module source are then unpacked over them (`dpkg-deb -x`) without their own dependencies:
6.12's headers depend on the kernel's image (~100 MB) and linux-base, which an install wants and a compile never
reads. What went in is recorded in a manifest (package and version, read from the .deb files), since dpkg in the
root knows nothing.

A kernel of another architecture than this machine's (an arm64 kernel on an amd64 builder) is compiled across:
its root is this machine's tools with Debian's cross compiler at the version the kernel's headers ask for
(`gcc-12` → `gcc-12-aarch64-linux-gnu`), and the target's headers and module source (NAME:ARCH) unpacked over
them. Each target architecture has roots of its own.

Roots are keyed by content (the kernels' headers and the flavours' sources in them). A kernel or flavour that no
root has gets a new root, with what this run needs and what the newest root had (up to MAX_KERNELS kernels), and the
roots no compile is using are then removed. A compile holds its root shared while it runs, so no root is ever removed
under it; roots are made one at a time, under a lock, and appear whole or not at all.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpualign.archive.apt import TRIPLETS, Archive, file_lock, mmdebstrap_list_options
from gpualign.base.errors import BadInput, Failed
from gpualign.loaders.archive_reading import ensure_root

FLAVOURS = {"proprietary": ("nvidia-kernel-source", "nvidia-kernel.tar.xz", "nvidia-kernel"),
            "open": ("nvidia-open-kernel-source", "nvidia-open-kernel.tar.xz", "nvidia-open-kernel")}
# What a compile runs besides the compiler: Essential packages are not implied in an extracted root, so the shell
# and the utilities NVIDIA's conftest.sh and Kbuild call are named. gcc brings binutils (ld, strip).
TOOLS = ("dash", "bash", "coreutils", "sed", "grep", "mawk", "findutils", "diffutils", "tar", "gzip", "xz-utils",
         "gcc", "make", "libc6-dev", "kmod")
ALTERNATIVES = {"usr/bin/awk": "mawk", "usr/bin/cc": "gcc"}  # what update-alternatives would have made
MAX_KERNELS = 4  # a new root carries the newest root's kernels over while it stays this small
Progress = Callable[[str], None]


class BuildError(Failed):
    """A build step failed (exit 1: the image could not be made; nothing was pushed). Making the build root is the
    first step; the compile, the image and the push raise it too."""

    retryable = True  # a download cut, a full disk: the same build may pass once that is mended


@dataclass(frozen=True)
class Root:
    path: Path  # the directory holding rootfs/ and manifest.json
    kernels: dict[str, str] = field(default_factory=dict)  # kernel -> its headers package
    flavours: tuple[str, ...] = ()
    packages: dict[str, str] = field(default_factory=dict)  # package -> version, as extracted

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    def version(self, package: str) -> str:
        """The upstream version of a package in the root (535.261.03 for 535.261.03-1~deb12u1)."""
        full = self.packages.get(package)
        if not full:
            raise BuildError(f"{package} is not in the build root {self.rootfs}")
        return upstream(full)

    def has(self, kernel: str, flavour: str | None) -> bool:
        return kernel in self.kernels and (flavour is None or flavour in self.flavours)


def headers(rootfs: Path, kernel: str) -> Path:
    """Where a root holds a kernel's headers (linux-headers-<kernel>: its .config, Module.symvers, vmlinux)."""
    return rootfs / "usr" / "src" / f"linux-headers-{kernel}"


def kernel_config(rootfs: Path, kernel: str) -> str | None:
    """The kernel's .config as its headers ship it, or None when they hold none."""
    config = headers(rootfs, kernel) / ".config"
    return config.read_text(errors="replace") if config.is_file() else None


def upstream(version: str) -> str:
    """A Debian version's upstream part: 535.261.03 for 535.261.03-1~deb12u1."""
    from debian.debian_support import Version

    return str(Version(version).upstream_version).split("+", 1)[0]


def cross_prefix(archive: Archive) -> str:
    """CROSS_COMPILE for the archive's target ("" when it is this machine's architecture)."""
    if not archive.cross:
        return ""
    if archive.arch not in TRIPLETS:
        raise BadInput(f"architecture {archive.arch!r}: gpualign cross-compiles for {', '.join(TRIPLETS)}")
    return f"{TRIPLETS[archive.arch]}-"


def _base(archive: Archive) -> Path:
    return ensure_root() / "build-roots" / archive.key


def _use_lock(root: Path) -> Path:
    return root.parent / f"{root.name}.use"


def roots(archive: Archive) -> list[Root]:
    """The complete roots, newest first."""
    found = []
    for manifest in _base(archive).glob("*/manifest.json"):
        try:
            data = json.loads(manifest.read_text())
            found.append((manifest.stat().st_mtime, Root(manifest.parent, dict(data["kernels"]),
                                                         tuple(data["flavours"]), dict(data["packages"]))))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a root being removed, or from another version: not used
    return [r for _t, r in sorted(found, key=lambda tr: tr[0], reverse=True)]


def ready(archive: Archive, kernel: str) -> bool:
    """A cached root has the kernel's headers."""
    return any(kernel in r.kernels for r in roots(archive))


@contextmanager
def held(archive: Archive, kernel: str, flavour: str | None = None, *, together: tuple[str, ...] = (),
         progress: Progress = lambda _m: None) -> Iterator[Root]:
    """A root with `kernel`'s headers (and `flavour`'s module source, when given), held so that it is not removed
    while the caller uses it. Made when no cached root has them, with the headers of the kernels in `together` too
    (the other kernels of this run), so one root serves a run."""
    if flavour is not None and flavour not in FLAVOURS:
        raise BadInput(f"flavour {flavour!r}: expected {' or '.join(FLAVOURS)}")
    with file_lock(f"root-{archive.key}.lock"):
        existing = roots(archive)
        root = next((r for r in existing if r.has(kernel, flavour) and _current(archive, r, flavour)), None)
        if root is None:
            root = _make(archive, _wanted(archive, existing, kernel, flavour, together), progress)
        handle = _use_lock(root.path).open("w")
        fcntl.flock(handle, fcntl.LOCK_SH)  # taken under the root lock: no one removes it between
        if root.path not in {r.path for r in existing}:
            _remove_unused(archive, keep=root.path)
    try:
        yield root
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _current(archive: Archive, root: Root, flavour: str | None) -> bool:
    """The root's module source is the one Debian serves now (a root made before an update is not compiled in)."""
    if flavour is None:
        return True
    package = FLAVOURS[flavour][0]
    return root.packages.get(package) == archive.target_version(package)


def _wanted(archive: Archive, existing: list[Root], kernel: str, flavour: str | None,
            together: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
    kernels = list(dict.fromkeys((kernel, *together)))
    flavours = [flavour] if flavour is not None else []
    if existing:  # carry the newest root's contents over, while the new root stays small
        newest = existing[0]
        carried = [k for k in newest.kernels if k not in kernels]
        if len(kernels) + len(carried) <= MAX_KERNELS:
            kernels += [k for k in carried if archive.target_version(newest.kernels[k]) is not None]  # still served
            flavours += [f for f in newest.flavours if f not in flavours]
    return {k: archive.require_headers(k) for k in kernels}, tuple(flavours)


def _make(archive: Archive, wanted: tuple[dict[str, str], tuple[str, ...]], progress: Progress) -> Root:
    kernels, flavours = wanted
    if os.geteuid() != 0:
        raise BadInput("building driver modules needs root (mmdebstrap and chroot), as buildah does here")
    sources = [FLAVOURS[f][0] for f in flavours]
    targets = [*kernels.values(), *sources]  # unpacked over the root (NAME:ARCH across)
    packages = [*TOOLS, *_host_tools(archive, list(kernels.values()))]
    key = hashlib.sha256(" ".join(sorted([*packages, *(f"{t}:{archive.arch}" for t in targets)])).encode()
                         ).hexdigest()[:16]
    # named apart from any root with the same package names (one whose source Debian has since replaced, that a
    # compile may still hold): never replaced in place
    final = _base(archive) / f"{key}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    final.parent.mkdir(parents=True, exist_ok=True)
    progress(f"build root: mmdebstrap (extract) {archive.suite} with {', '.join((*kernels.values(), *sources))}"
             + (f" ({archive.arch}, compiled across with {cross_prefix(archive)}gcc)" if archive.cross else ""))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{key}.", dir=final.parent) as tmp:
        staging = Path(tmp) / "root"
        staging.mkdir()
        listing = Path(tmp) / "packages.tsv"
        log = Path(tmp) / "mmdebstrap.log"
        hook = ('for deb in "$1"/var/cache/apt/archives/*.deb; do '
                "dpkg-deb --show --showformat='${Package}\\t${Version}\\n' \"$deb\"; done > \"$GPUALIGN_LISTING\"")
        cmd = ["mmdebstrap", "--quiet", "--variant=extract", *mmdebstrap_list_options(),
               "--components=main,contrib,non-free,non-free-firmware", f"--include={','.join(packages)}",
               f"--extract-hook={hook}", archive.suite, str(staging / "rootfs"),
               *archive.source_lines(native=True)]
        try:
            with log.open("w") as out:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                      env={**os.environ, "GPUALIGN_LISTING": str(listing)})
        except FileNotFoundError:
            raise BadInput("mmdebstrap is not installed (scripts/install-debs installs it)") from None
        if proc.returncode != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            if "No space left on device" in tail:
                raise BuildError(f"making the build root: the disk is full ({ensure_root()}): free space and run "
                                "again")
            raise BuildError(f"mmdebstrap for the build root failed (exit {proc.returncode}): {tail}")
        versions = dict(line.split("\t", 1) for line in listing.read_text().splitlines() if "\t" in line)
        versions.update(_unpack_targets(archive, targets, staging / "rootfs", Path(tmp)))
        missing = [p for p in [*packages, *targets] if p not in versions]
        if missing:
            raise BuildError(f"the build root lacks {', '.join(missing)} after mmdebstrap; log: {log}")
        rootfs = staging / "rootfs"
        for link, target in ALTERNATIVES.items():
            if not (rootfs / link).exists():
                (rootfs / link).symlink_to(target)
        (staging / "manifest.json").write_text(json.dumps(
            {"suite": archive.suite, "kernels": kernels, "flavours": list(flavours), "packages": versions,
             "made": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.monotonic() - t0, 1)}, indent=1))
        os.replace(staging, final)
    return Root(final, kernels, flavours, versions)


def _host_tools(archive: Archive, headers: list[str]) -> list[str]:
    """What this machine runs to compile against the headers: its own packages for what they depend on to compile
    (kbuild's host programs; the headers' common part, for every architecture; the compiler they name, or across,
    Debian's cross compiler of that version: gcc-12 → gcc-12-aarch64-linux-gnu). The headers and the module source
    themselves are unpacked, without their dependencies: 6.12's headers depend on the kernel's image and
    linux-base, which an install wants and a compile never reads (the image alone is ~100 MB)."""
    triplet = cross_prefix(archive).rstrip("-")
    tools: list[str] = []
    for package in headers:
        for dep in archive.target_depends(package):
            compiler = re.fullmatch(r"(?:linux-compiler-)?(gcc-\d+)(?:-[a-z0-9]+)?", dep)
            if compiler:
                tools.append(f"{compiler.group(1)}-{triplet}" if triplet else dep)
            elif dep.startswith(("linux-kbuild-", "linux-headers-")):
                tools.append(dep)
    return list(dict.fromkeys(tools))


def _unpack_targets(archive: Archive, packages: list[str], rootfs: Path, tmp: Path) -> dict[str, str]:
    """The target's packages (NAME:ARCH), downloaded and unpacked over the root; returns their versions."""
    debs = tmp / "target-debs"
    debs.mkdir()
    os.chmod(debs, 0o777)  # apt downloads as its sandbox user where it can
    res = archive.download([archive.target(p) for p in packages], debs)
    if res.returncode != 0:
        raise BuildError(f"downloading {', '.join(packages)} ({archive.arch}) failed: "
                         f"{(res.stderr.strip().splitlines() or ['no .deb'])[-1]}")
    versions: dict[str, str] = {}
    for deb in sorted(debs.glob("*.deb")):
        shown = subprocess.run(["dpkg-deb", "--show", "--showformat=${Package}\t${Version}", str(deb)],
                               capture_output=True, text=True)
        unpacked = subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], capture_output=True, text=True)
        if shown.returncode != 0 or unpacked.returncode != 0:
            raise BuildError(f"unpacking {deb.name} failed: {(shown.stderr + unpacked.stderr).strip()[-200:]}")
        name, version = shown.stdout.split("\t", 1)
        versions[name] = version
    return versions


def _remove_unused(archive: Archive, keep: Path) -> None:
    """Remove the roots other than `keep` that no compile holds (and the single root older versions kept)."""
    if not archive.cross:
        shutil.rmtree(ensure_root() / "roots" / archive.suite, ignore_errors=True)
    for path in [p for p in _base(archive).iterdir() if p.is_dir() and p != keep]:
        use = _use_lock(path)
        with use.open("w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a compile is using it: the next new root removes it
            shutil.rmtree(path, ignore_errors=True)
            use.unlink(missing_ok=True)
