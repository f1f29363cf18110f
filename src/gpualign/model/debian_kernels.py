"""A Debian kernel release taken apart, as Debian's archive names it. Pure.

Debian names each kernel ABI in its packages (`linux-headers-<release>`, `linux-image-<release>`):

- bookworm's 6.1 line: `6.1.0-57-amd64`: upstream 6.1.0, ABI 57;
- the 6.12 line of bookworm-security and trixie: `6.12.118+deb13-amd64`: the ABI is the upstream version, marked with
  the release it is built for (`+deb12`, `+deb13`); a point release that must change the ABI again without a new
  upstream version adds `.N` (`6.12.115+deb13.1-amd64`); older backports wrote `+bpo`;
- then an optional variant, `cloud-` (a smaller kernel for virtual machines) or `rt-` (PREEMPT_RT), the CPU
  architecture (`amd64`, `arm64`, ...) and, on arm64, an optional page size (`-16k`; 4K pages otherwise).

Where a release reaches gpualign as NFD's label, `+` is `_` (gpualign.model.kernels reads it back first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RELEASE = re.compile(
    r"(?P<upstream>\d+\.\d+(?:\.\d+)?)"
    r"(?:-(?P<abi>\d+)|\+(?P<mark>deb(?P<deb>\d+)(?:\.(?P<point>\d+))?(?:\+(?P<again>\d+))?|bpo))"
    r"-(?:(?P<variant>cloud|rt)-)?(?P<arch>amd64|arm64|armmp(?:-lpae)?|armel|i386|686(?:-pae)?|powerpc64le|ppc64el"
    r"|s390x|riscv64|loong64|mips64r2el|mips64r6el|marvell|rpi|4kc-malta|5kc-malta|octeon|loongson-3)"
    r"(?:-(?P<pages>16k))?")
_ARCH = {"armmp": "arm", "armmp-lpae": "arm", "armel": "arm", "marvell": "arm", "rpi": "arm", "686": "386",
         "686-pae": "386", "i386": "386", "powerpc64le": "ppc64le", "ppc64el": "ppc64le"}


@dataclass(frozen=True)
class DebianKernel:
    """One Debian kernel release, by its parts."""

    release: str  # 6.12.115+deb13.1-cloud-amd64
    series: str  # 6.12: the upstream line
    built_for: str | None  # the Debian release its name says ("13"; "12" for +bpo), None for 6.1.0-N (bookworm's)
    variant: str  # "", "cloud" or "rt"
    arch: str  # as Kubernetes spells it: amd64, arm64, arm, ppc64le, ...
    pages: str  # "" (4K) or "16k"
    backports: bool  # +bpo: an older backports kernel
    abi: tuple[int, ...]  # orders the ABIs of one line: (57,) for 6.1.0-57; (115, 1, 0) for 6.12.115+deb13.1

    @property
    def line(self) -> tuple[str, str, str, str]:
        """The kernels apt moves a node along: one series, variant, architecture and page size."""
        return self.series, self.variant, self.arch, self.pages

    @property
    def preempt_rt(self) -> bool:
        return self.variant == "rt"


def parse(release: str) -> DebianKernel | None:
    """A Debian kernel release taken apart, or None for a release of another shape (Ubuntu's, RHEL's, a custom
    kernel's)."""
    m = _RELEASE.fullmatch(release)
    if m is None:
        return None
    upstream = m.group("upstream")
    series = ".".join(upstream.split(".")[:2])
    built_for = m.group("deb") or ("12" if m.group("mark") == "bpo" else None)
    arch = _ARCH.get(m.group("arch"), m.group("arch"))
    if m.group("abi") is not None:
        abi: tuple[int, ...] = (int(m.group("abi")),)
    else:
        # a re-upload of one upstream release (6.12.74+deb13+1, package 6.12.74-2) follows its first upload
        abi = (int(upstream.split(".")[2]) if upstream.count(".") == 2 else 0, int(m.group("point") or 0),
               int(m.group("again") or 0))
    return DebianKernel(release=release, series=series, built_for=built_for, variant=m.group("variant") or "",
                        arch=arch, pages=m.group("pages") or "",
                        backports=m.group("mark") == "bpo", abi=abi)
