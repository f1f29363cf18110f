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
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from gpualign.model.kernels import debian_release, release_of


class Maker(StrEnum):
    PRESENT = "present"
    MIRROR = "mirror"
    BUILD = "build"
    RENDER = "render"
    NONE = "none"


# The package of NVIDIA's module source gpualign builds from (and its open flavour): a branch a release carries
# only as nvidia-tesla-N-kernel-source (with its own user space, nvidia-tesla-N-*) is named, not built.
BUILT_SOURCE = "nvidia-kernel-source"
OPEN_SOURCE = "nvidia-open-kernel-source"
_SOURCE = re.compile(r"nvidia(?:-tesla(?:-(?P<tesla>\d+))?|-open)?-kernel-source")


@dataclass(frozen=True)
class Source:
    """One package of NVIDIA's kernel module source in a Debian release, at its NVIDIA version."""

    package: str
    version: str  # NVIDIA's, e.g. 535.309.01 (Debian's 535.309.01-0+deb12u1)

    @property
    def branch(self) -> str:
        return self.version.split(".", 1)[0]


def sources_from(packages: Mapping[str, str]) -> tuple[Source, ...]:
    """NVIDIA's module sources among a release's packages (package -> Debian version, as apt-cache shows them),
    by package name. Others are ignored."""
    found = []
    for package, version in sorted(packages.items()):
        if not _SOURCE.fullmatch(package) or not version:
            continue
        upstream = version.split(":", 1)[-1].split("-", 1)[0]
        if re.fullmatch(r"\d+(?:\.\d+)+", upstream):
            found.append(Source(package, upstream))
    return tuple(found)


@dataclass(frozen=True)
class DebianRelease:
    """A Debian release gpualign builds for: its suite, the CPU architectures and kernel series built, and NVIDIA's
    module sources its archive carries (read from the archive, or the rules' copy of it)."""

    suite: str
    archs: tuple[str, ...]
    series: tuple[str, ...]
    sources: tuple[Source, ...]
    read: str = "the rules"  # where `sources` were read: the rules, or Debian's archive (with the day)

    @property
    def branches(self) -> tuple[str, ...]:
        """The branches gpualign builds for the release: those of its nvidia-kernel-source."""
        return tuple(sorted({s.branch for s in self.sources if s.package == BUILT_SOURCE}, key=int))

    @property
    def carried(self) -> tuple[str, ...]:
        """Every branch the archive carries, in any package."""
        return tuple(sorted({s.branch for s in self.sources}, key=int))

    def version(self, branch: str, flavour: str = "proprietary") -> str | None:
        """The NVIDIA version a build of `branch` gets, for a flavour (None: the release does not build it)."""
        package = OPEN_SOURCE if flavour == "open" else BUILT_SOURCE
        return next((s.version for s in self.sources if s.package == package and s.branch == branch), None)

    def carried_as(self, branch: str) -> list[Source]:
        return [s for s in self.sources if s.branch == branch]


@dataclass(frozen=True)
class DebianTable:
    """The Debian releases gpualign builds for, by OS tag (debian12, debian13): hashable, so decisions on it are
    cached."""

    releases: tuple[tuple[str, DebianRelease], ...]

    def get(self, os_tag: str) -> DebianRelease | None:
        return next((r for t, r in self.releases if t == os_tag), None)

    def __contains__(self, os_tag: object) -> bool:
        return any(t == os_tag for t, _ in self.releases)

    @property
    def os_tags(self) -> tuple[str, ...]:
        return tuple(sorted(t for t, _ in self.releases))

    @property
    def branches(self) -> frozenset[str]:
        """Every branch gpualign builds for some release."""
        return frozenset(b for _, r in self.releases for b in r.branches)

    def with_sources(self, os_tag: str, sources: tuple[Source, ...], read: str) -> DebianTable:
        import dataclasses

        return DebianTable(tuple((t, dataclasses.replace(r, sources=sources, read=read) if t == os_tag else r)
                                 for t, r in self.releases))


# Debian's suite for each release gpualign builds (a fact of Debian's, not of its archive's contents).
SUITES = {"debian12": "bookworm", "debian13": "trixie"}
# Families whose recipes gpualign renders (and unit-tests) but does not run: their archives are reachable only
# from a builder of the user's.
RENDERED = ("ubuntu", "rhel")
RENDERED_RELEASES = {"ubuntu": ("ubuntu22.04", "ubuntu24.04"), "rhel": ("rhel9",)}

# The CPU architecture a kernel's release names, where it names one (Debian: -amd64, -arm64, -powerpc64le, -s390x,
# -riscv64, -armmp for armhf; RHEL: .x86_64, .aarch64; Ubuntu's -nvidia-64k kernels are arm64 only). Kubernetes
# spells architectures as Go does.
_KERNEL_ARCH = ((re.compile(r".*-amd64$"), "amd64"), (re.compile(r".*-arm64$"), "arm64"),
                (re.compile(r".*-powerpc64le$"), "ppc64le"), (re.compile(r".*-s390x$"), "s390x"),
                (re.compile(r".*-riscv64$"), "riscv64"), (re.compile(r".*-armmp(-lpae)?$"), "arm"),
                (re.compile(r".*[._]x86_64$"), "amd64"), (re.compile(r".*[._]aarch64(_64k)?$"), "arm64"),
                (re.compile(r".*-64k$"), "arm64"))


# The shapes of Debian's kernel releases gpualign reads: 6.1.0-50-amd64 (bookworm's 6.1 ABI releases, also
# -cloud-amd64, -rt-amd64) and 6.12.117+deb12-amd64 (bookworm-security's 6.12; NFD labels it 6.12.117_deb12-amd64,
# gpualign.model.kernels reads it back). Backports (+bpo) are not in the suites a build reads.
_DEBIAN_BUILT = re.compile(r"\d+\.\d+\.\d+(?:-\d+|\+deb\d+)-[a-z0-9]+(?:-[a-z0-9]+)*")


def debian_suite(os_tag: str) -> str:
    """The suite whose archive builds an OS tag's images (debian13: trixie); bookworm for any other."""
    return SUITES.get(os_tag, "bookworm")


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
def who_makes(os_tag: str, branch: str, kernel: str, arch: str | None, published: bool, *, debian: DebianTable,
              precompiled: bool = True, flavour: str = "proprietary") -> Making:
    """Who makes the image of (OS tag, branch, kernel) for a node of CPU architecture `arch` (None: the kernel's
    own, else amd64), when it is not present. `published`: the rules say NVIDIA publishes it. `debian`: the
    releases gpualign builds and what their archives carry (Rules.debian: the archive as ensure read it last, else
    the rules' copy). `flavour`: the kernel modules the node's driver pod loads (gpualign.model.flavours)."""
    arch = arch or kernel_arch(kernel) or "amd64"
    if published:
        return Making(Maker.MIRROR, "NVIDIA publishes it: mirror it (gpualign ensure)")
    if not precompiled:
        return Making(Maker.NONE, f"NVIDIA's regular driver image for {os_tag} is not published for this version: "
                                  "gpualign builds precompiled images only")
    named = kernel_arch(kernel)
    if named is not None and named != arch:
        return Making(Maker.NONE, f"kernel {kernel} is an {named} kernel, but the node is {arch}")
    release = debian.get(os_tag)
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
            return Making(Maker.NONE, _not_built(release, branch))
        if flavour == "open":
            if (why := open_problem(release, branch)) is not None:
                return Making(Maker.NONE, why)
            return Making(Maker.BUILD, f"gpualign builds it from Debian {release.suite}'s NVIDIA {branch}, open "
                                       "kernel modules (gpualign ensure --flavour open, or the controller's build "
                                       "Job)")
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
                                  f"{', '.join(debian.os_tags)}")
    return Making(Maker.NONE, f"gpualign has no recipe for {os_tag}: make the image by hand")


def open_problem(release: DebianRelease, branch: str) -> str | None:
    """Why a release's open modules of `branch` cannot make an image, or None. The user space comes from the same
    Debian source as nvidia-kernel-source, at its version: open modules of another version would not match it."""
    open_version, user_space = release.version(branch, "open"), release.version(branch)
    if open_version is None:
        return (f"Debian {release.suite} carries no open kernel modules of NVIDIA {branch} ({OPEN_SOURCE}): set "
                "kernelModuleType: proprietary for these nodes")
    if open_version != user_space:
        return (f"Debian {release.suite}'s open kernel modules of NVIDIA {branch} are {open_version}, its user space "
                f"{user_space}: no image can hold both at one version (set kernelModuleType: proprietary for these "
                "nodes)")
    return None


def _not_built(release: DebianRelease, branch: str) -> str:
    """Why a release's image of `branch` is not built: the archive does not carry the branch (naming those it
    does), or carries it only in packages gpualign does not build from."""
    builds = f"gpualign builds {', '.join(release.branches) or 'none'} (nvidia-kernel-source)"
    as_ = release.carried_as(branch)
    if as_:
        named = ", ".join(f"{s.package} {s.version}" for s in as_)
        return f"Debian {release.suite} carries NVIDIA {branch} only as {named}, which gpualign does not build " \
               f"from: {builds}"
    return f"Debian {release.suite} carries NVIDIA {', '.join(release.carried)}, not {branch} ({builds}; " \
           f"read from {release.read})"


# What the controller's build trigger makes a Job for.
JOB_MAKERS = frozenset({Maker.BUILD, Maker.MIRROR})
