"""A precompiled driver tag, `<branch>-<kernel>-<os-tag>`, taken apart; and which OS families are built here. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.errors import BadInput

_OS_TAG = re.compile(r"(ubuntu\d+\.\d+|rhel\d+(?:\.\d+)?|debian\d+|rocky\d+(?:\.\d+)?|sles\d+(?:\.\d+)?)")
_TAG = re.compile(r"(?P<branch>\d{3,4})-(?P<kernel>.+)-(?P<os>[a-z]+[0-9.]+)")

# What each OS family's archive carries, for the recipe that builds there. Debian bookworm carries NVIDIA 535
# (nvidia-kernel-source / nvidia-open-kernel-source in non-free / contrib).
DEBIAN_BRANCHES = {"debian12": ("bookworm", ("535",))}
RENDERED_ONLY = ("ubuntu", "rhel")  # recipes rendered and unit-tested, not run: their archives are unreachable here


@dataclass(frozen=True)
class TagSpec:
    tag: str
    branch: str
    kernel: str
    os_tag: str

    @property
    def family(self) -> str:
        return re.sub(r"[0-9.]+$", "", self.os_tag)


def parse(tag: str) -> TagSpec:
    """'535-6.1.0-50-amd64-debian12' → branch 535, kernel 6.1.0-50-amd64, OS tag debian12."""
    text = tag.rsplit(":", 1)[-1] if "/" in tag or tag.count(":") else tag
    m = _TAG.fullmatch(text)
    if not m or not _OS_TAG.fullmatch(m.group("os")):
        raise BadInput(f"{tag!r}: not a precompiled driver tag <branch>-<kernel>-<os-tag>, e.g. "
                       "535-6.1.0-50-amd64-debian12")
    return TagSpec(text, m.group("branch"), m.group("kernel"), m.group("os"))


def buildable_here(spec: TagSpec) -> str:
    """The Debian suite that builds it here, or BadInput naming why not (an OS without a recipe, a branch the OS
    does not carry). Ubuntu and RHEL have recipes, rendered only: BadInput says so."""
    if spec.os_tag in DEBIAN_BRANCHES:
        suite, branches = DEBIAN_BRANCHES[spec.os_tag]
        if not spec.kernel.endswith("amd64"):
            raise BadInput(f"{spec.tag}: kernel {spec.kernel} is not an amd64 kernel: gpualign builds Debian "
                           "images for amd64 (x86_64) only")
        if spec.branch not in branches:
            raise BadInput(f"{spec.tag}: Debian {suite} carries NVIDIA {', '.join(branches)}, not {spec.branch}")
        return suite
    if spec.family in RENDERED_ONLY:
        raise BadInput(f"{spec.tag}: {spec.os_tag} images are not built by gpualign: render the recipe with "
                       "`gpualign ensure --render DIR` and build it where the distribution's archive is reachable "
                       "(or mirror NVIDIA's published image with --upstream)")
    raise BadInput(f"{spec.tag}: unknown OS {spec.os_tag!r}: gpualign builds debian12 here and renders ubuntu "
                   "and rhel recipes")
