"""A precompiled driver tag, `<branch>-<kernel>-<os-tag>`, taken apart; and which OS families are built here. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.base.errors import BadInput
from gpualign.judging.refusals import NotBuiltHere
from gpualign.model.kernels import release_of
from gpualign.model.makers import DebianTable, Maker, Reason, who_makes

_OS_TAG = re.compile(r"(ubuntu\d+\.\d+|rhel\d+(?:\.\d+)?|debian\d+|rocky\d+(?:\.\d+)?|sles\d+(?:\.\d+)?)")
_TAG = re.compile(r"(?P<branch>\d{3,4})-(?P<kernel>.+)-(?P<os>[a-z]+[0-9.]+)")
_OCI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # the OCI distribution spec's tag

@dataclass(frozen=True)
class TagSpec:
    tag: str
    branch: str
    kernel: str  # the release (uname -r, headers, version magic): 6.12.117+deb13-amd64
    os_tag: str
    kernel_label: str = ""  # the tag's spelling, as NFD labels it: 6.12.117_deb13-amd64 (gpualign.model.kernels)

    @property
    def family(self) -> str:
        return re.sub(r"[0-9.]+$", "", self.os_tag)


def parse(tag: str) -> TagSpec:
    """'535-6.1.0-50-amd64-debian12' → branch 535, kernel 6.1.0-50-amd64, OS tag debian12. A kernel NFD labels
    with `_` for the release's `+` is read back as the release: '535-6.12.117_deb12-amd64-debian12' → kernel
    6.12.117+deb12-amd64 (its headers, version magic and /lib/modules), kernel_label 6.12.117_deb12-amd64."""
    text = tag.rsplit(":", 1)[-1] if "/" in tag or tag.count(":") else tag
    if not _OCI_TAG.fullmatch(text):
        bad = sorted({c for c in text if not (c.isascii() and (c.isalnum() or c in "._-"))})
        fix = f" (write it as NFD labels the kernel: {text.replace('+', '_')})" if "+" in text else ""
        raise BadInput(f"{tag!r}: not a valid image tag: {' '.join(repr(c) for c in bad) or 'its length'} "
                       f"cannot be in one{fix}")
    m = _TAG.fullmatch(text)
    if not m or not _OS_TAG.fullmatch(m.group("os")):
        raise BadInput(f"{tag!r}: not a precompiled driver tag <branch>-<kernel>-<os-tag>, e.g. "
                       "535-6.1.0-50-amd64-debian12")
    return TagSpec(text, m.group("branch"), release_of(m.group("kernel")), m.group("os"), m.group("kernel"))


def try_parse(tag: str) -> TagSpec | None:
    """The tag taken apart, or None for a tag of another shape (`latest`, a regular image's `<version>-<os-tag>`)."""
    try:
        return parse(tag)
    except BadInput:
        return None


def buildable_here(spec: TagSpec, arch: str | None = None, *, debian: DebianTable) -> str:
    """The Debian suite that builds it here, or BadInput naming why not (gpualign.model.makers decides, as it does for
    check, plan and the controller: a recipe that is only rendered, an OS without one, a branch the OS does not
    carry, another architecture). `debian`: the releases, as their archives carry them (Archive.debian_table)."""
    making = who_makes(spec.os_tag, spec.branch, spec.kernel_label or spec.kernel, arch, False, debian=debian)
    release = debian.get(spec.os_tag)
    if making.maker is Maker.BUILD and release is not None:
        return release.suite
    if making.maker is Maker.RENDER and making.reason is Reason.NVIDIA_REPOSITORY:
        raise BadInput(f"{spec.tag}: {making.why}")
    if making.maker is Maker.RENDER:
        raise NotBuiltHere(spec.tag, spec.os_tag)
    raise BadInput(f"{spec.tag}: {making.why}")
