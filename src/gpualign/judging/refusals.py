"""The judging room's refusals that the command line words with its flags (cli/hints.py). A module of its own, so
that wording an error loads nothing else."""

from __future__ import annotations

from gpualign.base.errors import BadInput


class NotBuiltHere(BadInput):
    """An OS whose images gpualign renders a recipe for, but does not build."""

    def __init__(self, tag: str, os_tag: str) -> None:
        super().__init__(f"{tag}: {os_tag} images are not built by gpualign: render the recipe with `gpualign ensure "
                         "--render DIR` and build it where the distribution's archive is reachable (or mirror NVIDIA's "
                         "published image)")
        self.tag, self.os_tag = tag, os_tag
