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

from gpualign.model import debian_kernels
from gpualign.model.flavours import Flavour
from gpualign.model.kernels import Kernel, release_of


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
    headers: frozenset[str] | None = None  # the kernel releases whose headers the suites carry, where read
    headers_read: str = ""  # when and where `headers` were read

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
        package = OPEN_SOURCE if flavour == Flavour.OPEN else BUILT_SOURCE
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

    def with_headers(self, os_tag: str, headers: frozenset[str], read: str) -> DebianTable:
        """The table with the kernel releases whose headers an OS tag's suites carry, as read (`read`: where and
        when)."""
        import dataclasses

        return DebianTable(tuple((t, dataclasses.replace(r, headers=headers, headers_read=read) if t == os_tag
                                  else r) for t, r in self.releases))


# Debian's suite for each release gpualign builds (a fact of Debian's, not of its archive's contents).
SUITES = {"debian12": "bookworm", "debian13": "trixie"}
# Families whose recipes gpualign renders (and unit-tests) but does not run: their archives are reachable only
# from a builder of the user's.
RENDERED = ("ubuntu", "rhel")
RENDERED_RELEASES = {"ubuntu": ("ubuntu22.04", "ubuntu24.04"), "rhel": ("rhel9",)}

def debian_suite(os_tag: str) -> str:
    """The suite whose archive builds an OS tag's images (debian13: trixie); bookworm for any other."""
    return SUITES.get(os_tag, "bookworm")


def family(os_tag: str) -> str:
    """ubuntu22.04 → ubuntu; debian12 → debian."""
    return re.sub(r"[0-9.]+$", "", os_tag)


class Reason(StrEnum):
    """Why an image is made as it is, or not at all: what a program branches on. The sentence is `Making.why`."""

    PUBLISHED = "published"  # NVIDIA publishes it: mirrored
    BUILDS = "builds"  # gpualign builds it
    RENDERS = "renders"  # gpualign writes its recipe
    REGULAR_ONLY = "regular-only"  # the node runs NVIDIA's regular (not precompiled) driver image
    ARCH = "arch"  # the kernel or the node is of an architecture gpualign does not build for
    NOT_DEBIAN_KERNEL = "not-debian-kernel"  # the kernel's release is not one Debian names
    OTHER_RELEASE = "other-release"  # the kernel is another Debian release's
    SERIES = "series"  # a kernel line (backports') the release's suites do not carry
    BACKPORTS = "backports"  # a +bpo kernel: backports are not among the suites a build reads
    PREEMPT_RT = "preempt-rt"  # NVIDIA's driver refuses real-time kernels
    PAGE_SIZE = "page-size"  # an arm64 kernel with 16K pages
    NO_HEADERS = "no-headers"  # the archive carries no headers for the kernel
    BRANCH = "branch"  # the release carries no module source of the branch gpualign builds from
    OPEN_MODULES = "open-modules"  # the release's open modules cannot make an image of the branch
    NO_RECIPE = "no-recipe"  # no recipe for the OS
    NVIDIA_REPOSITORY = "nvidia-repository"  # a branch newer than the release carries: NVIDIA's own repository's recipe


@dataclass(frozen=True)
class Making:
    """Who makes one image, and why: the reason a program reads, and the line a user reads."""

    maker: Maker
    why: str
    reason: Reason = Reason.NO_RECIPE


def _none(reason: Reason, why: str) -> Making:
    return Making(Maker.NONE, why, reason)


@lru_cache(maxsize=1024)
def who_makes(os_tag: str, branch: str, kernel: str, arch: str | None, published: bool, *, debian: DebianTable,
              precompiled: bool = True, flavour: str = "proprietary") -> Making:
    """Who makes the image of (OS tag, branch, kernel) for a node of CPU architecture `arch` (None: the kernel's
    own, else amd64), when it is not present. `published`: the rules say NVIDIA publishes it. `debian`: the
    releases gpualign builds and what their archives carry (Rules.debian: the archive as ensure read it last, else
    the rules' copy). `flavour`: the kernel modules the node's driver pod loads (gpualign.model.flavours)."""
    named = Kernel.of(kernel).arch
    arch = arch or named or "amd64"
    if published:
        return Making(Maker.MIRROR, "NVIDIA publishes it: mirror it (gpualign ensure)", Reason.PUBLISHED)
    if not precompiled:
        return _none(Reason.REGULAR_ONLY, f"NVIDIA's regular driver image for {os_tag} is not published for this "
                                          "version: gpualign builds precompiled images only")
    if named is not None and named != arch:
        return _none(Reason.ARCH, f"kernel {kernel} is an {named} kernel, but the node is {arch}")
    release = debian.get(os_tag)
    if release is not None:
        return _debian_making(release, os_tag, branch, kernel, arch, flavour)
    fam = family(os_tag)
    if fam in RENDERED:
        releases = RENDERED_RELEASES[fam]
        if not any(os_tag == r or os_tag.startswith(r + ".") for r in releases):
            return _none(Reason.NO_RECIPE, f"no recipe for {os_tag}: gpualign renders {' and '.join(releases)}")
        return Making(Maker.RENDER, f"gpualign renders its recipe for {arch} (gpualign ensure TAG --render DIR): "
                                    "build it where the distribution's archive is reachable", Reason.RENDERS)
    if fam == "debian":
        return _none(Reason.NO_RECIPE, f"gpualign does not build {os_tag} yet: it builds "
                                       f"{', '.join(debian.os_tags)}")
    return _none(Reason.NO_RECIPE, f"gpualign has no recipe for {os_tag}: make the image by hand")


def _debian_making(release: DebianRelease, os_tag: str, branch: str, kernel: str, arch: str,
                   flavour: str) -> Making:
    """who_makes for a Debian release gpualign builds: the kernel first (every node of it is refused alike,
    whatever its branch), then the branch and its module source."""
    if arch not in release.archs:
        return _none(Reason.ARCH, f"gpualign builds {os_tag} images for {', '.join(release.archs)}, not {arch}")
    real = release_of(kernel)
    spelled = f" ({real})" if real != kernel else ""
    parsed = debian_kernels.parse(real)
    if parsed is None:
        return _none(Reason.NOT_DEBIAN_KERNEL, f"kernel {kernel} is not a Debian kernel release (such as "
                                               "6.1.0-57-amd64 or 6.12.118+deb13-amd64)")
    if parsed.built_for is not None and f"debian{parsed.built_for}" != os_tag:
        return _none(Reason.OTHER_RELEASE, f"kernel {kernel} is Debian {parsed.built_for}'s, not {os_tag}'s: a "
                                           "node cannot run it")
    if parsed.backports:
        return _none(Reason.BACKPORTS, f"kernel {kernel}{spelled} is a backports kernel: gpualign builds from "
                                       f"Debian {release.suite} and its -updates and -security suites")
    if parsed.series not in release.series:
        return _none(Reason.SERIES, f"kernel {kernel}{spelled} is of the {parsed.series} line, which Debian "
                                    f"{release.suite} and its -updates and -security suites do not carry (a "
                                    f"backports kernel?): gpualign builds {release.suite}'s "
                                    f"{', '.join(release.series)}")
    if parsed.preempt_rt:
        plain = real.replace("-rt-", "-", 1)
        return _none(Reason.PREEMPT_RT, f"kernel {kernel}{spelled} is a PREEMPT_RT kernel, and NVIDIA's driver "
                                        "refuses real-time kernels (its build stops at the PREEMPT_RT sanity "
                                        f"check): run GPU nodes on {plain}")
    if parsed.pages:
        return _none(Reason.PAGE_SIZE, f"kernel {kernel}{spelled} uses {parsed.pages.upper()} pages, which "
                                       "NVIDIA's driver does not support on arm64 (it takes 4K pages, and 64K, "
                                       "which Debian does not build): run GPU nodes on Debian's 4K kernel, "
                                       f"{real.removesuffix('-' + parsed.pages)}")
    if (gone := _headers_gone(release, parsed)) is not None:
        return _none(Reason.NO_HEADERS, f"kernel {kernel}{spelled}: no linux-headers-{real} in Debian "
                                        f"{release.suite}, -updates or -security ({gone}): an ABI that has left "
                                        "the archive (snapshot.debian.org keeps it), or one from backports")
    if branch not in release.branches:
        if newer_than_carried(release, branch):
            return Making(Maker.RENDER, f"{_not_built(release, branch)}; gpualign renders a recipe that builds it "
                                        f"from NVIDIA's own Debian {os_tag.removeprefix('debian')} repository "
                                        f"({nvidia_repository(os_tag, arch)}) for {arch} (gpualign ensure TAG "
                                        "--render DIR): build it where that repository is reachable",
                          Reason.NVIDIA_REPOSITORY)
        return _none(Reason.BRANCH, _not_built(release, branch))
    if flavour == Flavour.OPEN:
        if (why := open_problem(release, branch)) is not None:
            return _none(Reason.OPEN_MODULES, why)
        return Making(Maker.BUILD, f"gpualign builds it from Debian {release.suite}'s NVIDIA {branch}, open "
                                   "kernel modules (gpualign ensure --flavour open, or the controller's build "
                                   "Job)", Reason.BUILDS)
    return Making(Maker.BUILD, f"gpualign builds it from Debian {release.suite}'s NVIDIA {branch} "
                               "(gpualign ensure, or the controller's build Job)", Reason.BUILDS)


def _headers_gone(release: DebianRelease, kernel: debian_kernels.DebianKernel) -> str | None:
    """Where the archive was read and has no headers for the kernel, though it has a later ABI of the same line
    (series, variant, architecture): when it was read. A kernel later than every one read may have been published
    since: None (ensure reads the archive again before it builds)."""
    if release.headers is None or kernel.release in release.headers:
        return None
    later = [k for k in map(debian_kernels.parse, release.headers)
             if k is not None and k.line == kernel.line and k.abi > kernel.abi]
    return f"read {release.headers_read}" if later else None


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


NVIDIA_REPOSITORIES = "https://developer.download.nvidia.com/compute/cuda/repos"


def nvidia_repository(os_tag: str, arch: str) -> str:
    """NVIDIA's own apt repository of a Debian release (its CUDA repository: drivers of every current branch), for
    amd64 (x86_64) or arm64 servers (sbsa)."""
    return f"{NVIDIA_REPOSITORIES}/{os_tag}/{'sbsa' if arch == 'arm64' else 'x86_64'}/"


def newer_than_carried(release: DebianRelease, branch: str) -> bool:
    """A branch newer than every branch the release's archive carries (Blackwell's 570 and later on Debian, which
    carries at most 550): NVIDIA's own repository has it."""
    carried = [int(b) for b in release.carried if b.isdigit()]
    return branch.isdigit() and bool(carried) and int(branch) > max(carried)


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
