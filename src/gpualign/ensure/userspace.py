"""NVIDIA's user space for a driver image, from Debian's archive at exactly the modules' version.

What the GPU Operator's consumers find under the driver container's root (`/run/nvidia/driver`): `nvidia-smi` (the
operator's startup probe and validator run it), `libcuda`, `libnvidia-ml`, `libnvidia-ptxjitcompiler` and
`libnvidia-cfg` (the container toolkit injects them into GPU workloads, found through the root's ld.so.cache) and
`nvidia-persistenced`. Debian ships each library under `/usr/lib/x86_64-linux-gnu/nvidia/current/` and puts the
soname links and `/usr/bin/nvidia-smi` in place with update-alternatives from maintainer scripts; the image runs no
maintainer script, so the same links are made here.

Every package but nvidia-persistenced must have the modules' upstream version, or the build is refused naming both
(a libcuda newer or older than the kernel module fails every CUDA call). nvidia-persistenced is its own Debian source
(contrib) with its own version; it only talks to the driver through libnvidia-cfg.

The packages are downloaded with gpualign's private apt state and unpacked (`dpkg-deb -x`), cached by version and
architecture. An arm64 image's user space is arm64's (under /usr/lib/aarch64-linux-gnu), and is checked by running
its own nvidia-smi and ldconfig under qemu-user (gpualign.ensure.foreign) when the builder is amd64.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpualign.archive.apt import TRIPLETS, Archive, file_lock
from gpualign.ensure import foreign
from gpualign.ensure.buildroot import BuildError, upstream
from gpualign.loaders.archive_reading import ensure_root

LIBS = {  # Debian package -> the library's soname (its file is <stem>.so.<driver version>)
    "libcuda1": "libcuda.so.1",
    "libnvidia-ml1": "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler1": "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-cfg1": "libnvidia-cfg.so.1",
}
TOOLS = ("nvidia-smi",)  # at the driver's version too
OWN_VERSION = ("nvidia-persistenced",)  # its own source and version
LIBDIR = "usr/lib/x86_64-linux-gnu"
NVIDIA_LIBDIR = f"{LIBDIR}/nvidia/current"


def libdir(arch: str) -> str:
    """Where an architecture's libraries are (usr/lib/aarch64-linux-gnu for arm64)."""
    return f"usr/lib/{TRIPLETS.get(arch, TRIPLETS['amd64'])}"


class UserSpaceMismatch(BuildError):
    """Debian's archive has no user space at the modules' version."""

    retryable = False  # until the archive moves on: a new recipe or an explicit retry


@dataclass(frozen=True)
class UserSpace:
    driver_version: str
    root: Path  # the unpacked tree, links made: copied into the image as it is
    packages: dict[str, str]  # package -> Debian version
    arch: str = "amd64"


def wanted(archive: Archive, driver_version: str) -> dict[str, str]:
    """Each user-space package's Debian version in the archive now, checked against the modules' version
    (UserSpaceMismatch naming both): what the user space would be made of, asked of the archive's lists only."""
    wanted = archive.target_versions([*LIBS, *TOOLS, *OWN_VERSION])
    absent = sorted(p for p, v in wanted.items() if v is None)
    if absent:
        raise UserSpaceMismatch(f"Debian's archive ({archive.describe()}) has no {', '.join(absent)}")
    wrong = {p: v for p, v in wanted.items() if p not in OWN_VERSION and upstream(v or "") != driver_version}
    if wrong:
        p, v = next(iter(wrong.items()))
        raise UserSpaceMismatch(f"user space {p} {upstream(v or '')} (Debian {v}) does not match the modules' "
                                f"NVIDIA {driver_version}: a driver image's libraries must be the modules' version")
    return {p: str(v) for p, v in wanted.items()}


def fetch(archive: Archive, driver_version: str,
          progress: Callable[[str], None] = lambda _m: None) -> UserSpace:
    """The user space at driver_version (cached), or UserSpaceMismatch naming both versions."""
    versions = wanted(archive, driver_version)
    key = "-".join(f"{p}={v}" for p, v in sorted(versions.items())) + (f"-{archive.arch}"
                                                                        if archive.arch != "amd64" else "")
    directory = ensure_root() / "userspace" / driver_version / _digest(key)
    done = directory / ".complete"
    with file_lock(f"userspace-{driver_version}.lock"):
        if not done.exists():
            progress(f"user space: {', '.join(f'{p} {v}' for p, v in versions.items())} from Debian"
                     + (f" ({archive.arch})" if archive.arch != "amd64" else ""))
            _unpack(archive, versions, directory)
            done.write_text(key + "\n")
    return UserSpace(driver_version, directory / "root", versions, archive.arch)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _unpack(archive: Archive, versions: dict[str, str], directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="gpualign-userspace-", dir=ensure_root()) as tmp:
        debs, root = Path(tmp) / "debs", Path(tmp) / "root"
        debs.mkdir()
        os.chmod(debs, 0o777)  # apt downloads as its sandbox user where it can
        res = archive.download([f"{archive.target(p)}={v}" for p, v in versions.items()], debs)
        if res.returncode != 0:
            raise BuildError(f"downloading NVIDIA's user space failed: {res.stderr.strip()[-300:]}")
        for deb in sorted(debs.glob("*.deb")):
            proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise BuildError(f"unpacking {deb.name} failed: {proc.stderr.strip()[-200:]}")
        for junk in ("usr/share/doc", "usr/share/bug", "usr/share/man", "usr/share/lintian", "etc/init.d",
                     "lib/systemd"):
            shutil.rmtree(root / junk, ignore_errors=True)
        for page in root.rglob("*.1.gz"):
            page.unlink()
        _link(root, libdir(archive.arch))
        directory.mkdir(parents=True)
        os.replace(root, directory / "root")


def _link(root: Path, lib: str = LIBDIR) -> None:
    """What update-alternatives would have made: the soname links and /usr/bin/nvidia-smi."""
    nvidia = f"{lib}/nvidia/current"
    for soname in LIBS.values():
        stem = soname.removesuffix(".1")
        found = sorted((root / nvidia).glob(f"{stem}.[0-9]*.*"))  # the file, not Debian's own links
        if not found:
            raise BuildError(f"the user space has no {stem} in /{nvidia}")
        (root / lib / soname).symlink_to(f"nvidia/current/{found[-1].name}")
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (root / "usr" / "bin" / "nvidia-smi").symlink_to("../lib/nvidia/current/nvidia-smi")


def check(image_root: Path, driver_version: str, arch: str = "amd64") -> dict[str, object]:
    """The user space in an image's root, as its consumers see it: each soname resolving to a file of the
    driver's version, in the root's ld.so.cache, and nvidia-smi's own version (`nvidia-smi -h`, which runs with no
    driver loaded). Returns what was checked; raises UserSpaceMismatch on the first problem."""
    lib = libdir(arch)
    libs: dict[str, str] = {}
    for soname in LIBS.values():
        link = image_root / lib / soname
        target = link.resolve() if link.is_symlink() or link.exists() else None
        if target is None or not target.is_relative_to(image_root.resolve()) or not target.is_file():
            raise UserSpaceMismatch(f"the image has no /{lib}/{soname}")
        version = target.name.split(".so.", 1)[1]
        if version != driver_version:
            raise UserSpaceMismatch(f"/{lib}/{soname} is NVIDIA {version}, the modules {driver_version}")
        libs[soname] = version
    cache = foreign.ldconfig(image_root, arch, "-p")
    uncached = [s for s in LIBS.values() if s not in cache.stdout]
    if uncached:
        raise UserSpaceMismatch(f"{', '.join(uncached)} not in the image's ld.so.cache (the container toolkit "
                                "finds driver libraries there)")
    smi = foreign.run(image_root, ["/usr/bin/nvidia-smi", "-h"], arch)
    first = (smi.stdout.strip().splitlines() or [""])[0]
    if smi.returncode != 0 or not first.endswith(f"v{driver_version}"):
        raise UserSpaceMismatch(f"nvidia-smi -h in the image says {first or smi.stderr.strip()[-200:]!r}, not "
                                f"v{driver_version}")
    daemon = foreign.run(image_root, ["/usr/bin/nvidia-persistenced", "--version"], arch)
    said = next((ln.split("version", 1)[1].strip() for ln in daemon.stdout.splitlines() if "version" in ln), "")
    if daemon.returncode != 0 or not said:
        raise UserSpaceMismatch(f"nvidia-persistenced does not run in the image: {daemon.stderr.strip()[-200:]}")
    return {"libraries": libs, "nvidia_smi": driver_version, "nvidia_persistenced": said}
