"""Running an image's own programs while it is assembled: under chroot when the image is this machine's
architecture, under qemu-user otherwise (an arm64 image assembled on an amd64 builder).

qemu-user (`qemu-aarch64-static`, Debian's qemu-user-static) runs one foreign program with `-L ROOT`, which makes
it look for its ELF interpreter and every file it opens under ROOT first: the program finds its libraries through
the image's own ld.so.cache, as it will in the container. No binfmt_misc registration is needed (a builder pod
cannot make one), nor is anything copied into the image.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gpualign.archive.apt import host_arch
from gpualign.base.errors import BadInput

QEMU = {"arm64": "qemu-aarch64-static", "amd64": "qemu-x86_64-static"}


def command(root: Path, argv: list[str], arch: str) -> list[str]:
    """argv (its program an absolute path inside the image) as run in the image's tree."""
    if arch == host_arch():
        return ["chroot", str(root), *argv]
    qemu = QEMU.get(arch)
    if qemu is None:
        raise BadInput(f"architecture {arch!r}: gpualign runs images' programs for {', '.join(QEMU)}")
    if shutil.which(qemu) is None:
        raise BadInput(f"{qemu} is not installed: an {arch} image's own programs (ldconfig, nvidia-smi) run "
                       "under it while it is assembled (scripts/install-debs installs qemu-user-static)")
    return [qemu, "-L", str(root), str(root / argv[0].lstrip("/")), *argv[1:]]


def run(root: Path, argv: list[str], arch: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(root, argv, arch), capture_output=True, text=True, timeout=300)


def ldconfig(root: Path, arch: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The image's ld.so.cache made (or, with -p, read) by ldconfig of the image's own architecture: a cache is
    written for one architecture's loader, whose entries another architecture's ldconfig marks otherwise. This
    machine's ldconfig serves an image of its own architecture; a foreign one runs the image's ldconfig (static)
    under qemu, in the tree by -r."""
    if arch == host_arch():
        return subprocess.run(["ldconfig", "-r", str(root), *args], capture_output=True, text=True, timeout=300)
    own = next((p for p in ("sbin/ldconfig", "usr/sbin/ldconfig") if (root / p).exists()), None)
    if own is None:
        raise BadInput(f"the {arch} image has no /sbin/ldconfig (libc-bin) to make its ld.so.cache")
    return subprocess.run([*command(root, [f"/{own}"], arch), "-r", str(root), *args], capture_output=True,
                          text=True, timeout=300)
