"""Who makes a driver image: one decision for check, plan, ensure and the controller's build trigger. Pure.

- `present`: the ledger has it (and nothing has been found wrong with it);
- `mirror`: the rules say NVIDIA publishes it: `gpualign ensure` copies it from the upstream;
- `build`: gpualign builds it, verified, by `gpualign ensure` here or in the controller's build Job;
- `render`: gpualign writes the recipe (`gpualign ensure TAG --render DIR`); it is built where that distribution's
  archive is reachable, since gpualign cannot build it itself;
- `none`: gpualign has no recipe for it: it is made by hand.

The controller makes a build Job for `build` and `mirror` only: anything else would be a privileged pod that can
only fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from gpualign.kernels import debian_release, release_of


class Maker(StrEnum):
    PRESENT = "present"
    MIRROR = "mirror"
    BUILD = "build"
    RENDER = "render"
    NONE = "none"


@dataclass(frozen=True)
class DebianRelease:
    """A Debian release gpualign builds for: its suite, the NVIDIA branches its archive carries, the CPU
    architectures built, and the kernel series whose images are built and verified."""

    suite: str
    branches: tuple[str, ...]
    archs: tuple[str, ...]
    series: tuple[str, ...] = ("6.1",)


# What gpualign builds, end to end and verified. Debian bookworm carries NVIDIA 535 (nvidia-kernel-source /
# nvidia-open-kernel-source in non-free / contrib).
# Kernel series: bookworm's own 6.1, and bookworm-security's 6.12 (6.12.N+deb12-amd64), whose modules NVIDIA
# 535.309.01 (bookworm-security's nvidia-kernel-source) compiles and verifies against (docs/ensure.md).
# Debian 13 (trixie): its default driver, NVIDIA 550 (nvidia-kernel-source 550.163.01), on its 6.12 kernels.
DEBIAN = {"debian12": DebianRelease("bookworm", ("535",), ("amd64",), ("6.1", "6.12")),
          "debian13": DebianRelease("trixie", ("550",), ("amd64",), ("6.12",))}
# Families whose recipes gpualign renders (and unit-tests) but does not run: their archives are reachable only
# from a builder of the user's.
RENDERED = ("ubuntu", "rhel")
RENDERED_RELEASES = {"ubuntu": ("ubuntu22.04", "ubuntu24.04"), "rhel": ("rhel9",)}

# The CPU architecture a kernel's release names, where it names one (Debian: -amd64, -arm64; RHEL: .x86_64,
# .aarch64; Ubuntu's -nvidia-64k kernels are arm64 only). Kubernetes spells architectures as Go does.
_KERNEL_ARCH = ((re.compile(r".*-amd64$"), "amd64"), (re.compile(r".*-arm64$"), "arm64"),
                (re.compile(r".*[._]x86_64$"), "amd64"), (re.compile(r".*[._]aarch64(_64k)?$"), "arm64"),
                (re.compile(r".*-64k$"), "arm64"))


# The shapes of Debian's kernel releases gpualign reads: 6.1.0-50-amd64 (bookworm's 6.1 ABI releases, also
# -cloud-amd64, -rt-amd64) and 6.12.117+deb12-amd64 (bookworm-security's 6.12; NFD labels it 6.12.117_deb12-amd64,
# gpualign.kernels reads it back). Backports (+bpo) are not in the suites a build reads.
_DEBIAN_BUILT = re.compile(r"\d+\.\d+\.\d+(?:-\d+|\+deb\d+)-[a-z0-9]+(?:-[a-z0-9]+)*")


def debian_suite(os_tag: str) -> str:
    """The suite whose archive builds an OS tag's images (debian13: trixie); bookworm for any other."""
    release = DEBIAN.get(os_tag)
    return release.suite if release else "bookworm"


def kernel_arch(kernel: str) -> str | None:
    """The CPU architecture a kernel's release names (6.1.0-50-amd64 → amd64), or None when it names none."""
    return next((arch for pattern, arch in _KERNEL_ARCH if pattern.fullmatch(kernel)), None)


def family(os_tag: str) -> str:
    """ubuntu22.04 → ubuntu; debian12 → debian."""
    return re.sub(r"[0-9.]+$", "", os_tag)


@dataclass(frozen=True)
class Making:
    """Who makes one image, and why, in one line a user reads."""

    maker: Maker
    why: str


@lru_cache(maxsize=1024)
def who_makes(os_tag: str, branch: str, kernel: str, arch: str | None, published: bool, *,
              precompiled: bool = True) -> Making:
    """Who makes the image of (OS tag, branch, kernel) for a node of CPU architecture `arch` (None: the kernel's
    own, else amd64), when it is not present. `published`: the rules say NVIDIA publishes it."""
    arch = arch or kernel_arch(kernel) or "amd64"
    if published:
        return Making(Maker.MIRROR, "NVIDIA publishes it: mirror it (gpualign ensure)")
    if not precompiled:
        return Making(Maker.NONE, f"NVIDIA's regular driver image for {os_tag} is not published for this version: "
                                  "gpualign builds precompiled images only")
    named = kernel_arch(kernel)
    if named is not None and named != arch:
        return Making(Maker.NONE, f"kernel {kernel} is an {named} kernel, but the node is {arch}")
    release = DEBIAN.get(os_tag)
    if release is not None:
        if arch not in release.archs:
            return Making(Maker.NONE, f"gpualign builds {os_tag} images for {', '.join(release.archs)}, not {arch}")
        if named is None:
            return Making(Maker.NONE, f"kernel {kernel} is not a Debian kernel release (such as 6.1.0-50-amd64)")
        release_ = release_of(kernel)
        series = ".".join(release_.split(".")[:2])
        built_for = debian_release(release_)
        if built_for is not None and f"debian{built_for}" != os_tag:
            return Making(Maker.NONE, f"kernel {kernel} is Debian {built_for}'s, not {os_tag}'s: a node "
                                      "cannot run it")
        if not _DEBIAN_BUILT.fullmatch(release_) or series not in release.series:
            spelled = f" ({release_})" if release_ != kernel else ""
            return Making(Maker.NONE, f"kernel {kernel}{spelled} is not built by gpualign yet: it builds Debian "
                                      f"{release.suite}'s kernel series {', '.join(release.series)}")
        if branch not in release.branches:
            return Making(Maker.NONE, f"Debian {release.suite} carries NVIDIA {', '.join(release.branches)}, "
                                      f"not {branch}")
        return Making(Maker.BUILD, f"gpualign builds it from Debian {release.suite}'s NVIDIA {branch} "
                                   "(gpualign ensure, or the controller's build Job)")
    fam = family(os_tag)
    if fam in RENDERED:
        releases = RENDERED_RELEASES[fam]
        if not any(os_tag == r or os_tag.startswith(r + ".") for r in releases):
            return Making(Maker.NONE, f"no recipe for {os_tag}: gpualign renders {' and '.join(releases)}")
        return Making(Maker.RENDER, f"gpualign renders its recipe for {arch} (gpualign ensure TAG --render DIR): "
                                    "build it where the distribution's archive is reachable")
    if fam == "debian":
        return Making(Maker.NONE, f"gpualign does not build {os_tag} yet: it builds "
                                  f"{', '.join(sorted(DEBIAN))}")
    return Making(Maker.NONE, f"gpualign has no recipe for {os_tag}: make the image by hand")


# What the controller's build trigger makes a Job for.
JOB_MAKERS = frozenset({Maker.BUILD, Maker.MIRROR})
