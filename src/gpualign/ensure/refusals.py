"""ensure's refusals that the command line words with its flags (cli/hints.py): each says what is wrong and carries
what the edge needs. A module of its own, so that wording an error loads nothing else."""

from __future__ import annotations

from pathlib import Path

from gpualign.base.errors import BadInput, Unreachable


class NoModulesGiven(BadInput):
    """The directory of given modules holds no .ko file."""

    def __init__(self, directory: Path) -> None:
        super().__init__(f"{directory}: no .ko file there")
        self.directory = directory


class UpstreamUnreachable(Unreachable):
    """The upstream registry could not be asked whether it publishes the tag."""

    def __init__(self, why: str, tag: str) -> None:
        super().__init__(f"{why} (asking the upstream for {tag})")
        self.why, self.tag = why, tag


class NoKernelVM(BadInput):
    """What the kernel load check needs to boot a kernel is not installed here (the command line names the switch
    that turns the check off)."""

    def __init__(self, tool: str, package: str) -> None:
        super().__init__(f"{tool} is not installed: ensure boots each image's own kernel in a VM and loads its "
                         f"modules before it pushes (Debian's {package}; scripts/install-debs installs it)")
        self.tool, self.package = tool, package
