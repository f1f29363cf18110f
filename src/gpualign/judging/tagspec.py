"""Which OS families are built here, for a precompiled driver tag (gpualign.model.driver_tag takes it apart)."""

from __future__ import annotations

from gpualign.base.errors import BadInput
from gpualign.judging.refusals import NotBuiltHere
from gpualign.model.driver_tag import TagSpec
from gpualign.model.makers import DebianTable, Maker, Reason, who_makes


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
