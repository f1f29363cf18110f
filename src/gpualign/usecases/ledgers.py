"""The ledgers a use case reads, and the repository its images are named under."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from gpualign.ledger import sources
from gpualign.ledger.sources import is_registry
from gpualign.model.expect import DEFAULT_REPOSITORY
from gpualign.model.image_ref import tag_of
from gpualign.usecases.nodes import Say, quiet

if TYPE_CHECKING:
    from gpualign.ledger.sources import Ledger

_DRIVER_TAG = re.compile(r"\d{3}")
NVIDIA_REPOSITORY = DEFAULT_REPOSITORY


def load_ledger(sources_given: list[str], docker_config: Path | None, *, missing_ok: bool = False,
                say: Say = quiet, warn: Say = quiet) -> Ledger:
    """The merged ledger. say: a line before a registry is read (it can take a while) and one after; warn: a ledger
    none of whose entries looks like a driver image tag. missing_ok: a registry repository nobody has pushed to is
    an empty ledger (it is about to be filled), not the mistyped name it otherwise is (exit 2)."""
    slow = [s for s in sources_given if sources.is_registry(s)]
    if slow:
        say(f"reading ledger {', '.join(slow)} …")
    ledger = sources.load(sources_given, docker_config=docker_config, missing_ok=missing_ok)
    count = len(ledger.fingerprint)
    say(f"ledger: {count:,} tags from {', '.join('<stdin>' if s == '-' else s for s in sources_given)}")
    odd = sorted(t for t in ledger.fingerprint if not _DRIVER_TAG.match(tag_of(t) or t))
    if odd and len(odd) == count:
        warn(f"no entry of the ledger looks like a driver image tag (<branch>-<kernel>-<os-tag> or "
             f"<version>-<os-tag>), e.g. {odd[0]!r}: is it the right file?")
    return ledger


def repository_for(explicit: str | None, ledgers: list[str], warn: Say = quiet) -> str:
    """The repository images are named under: the one given, else the first registry ledger's, else NVIDIA's.
    warn: a given repository that looks like the GPU Operator's split form (no `driver` image name)."""
    if explicit:
        repo = explicit.rstrip("/")
        if "driver" not in repo.rsplit("/", 1)[-1]:
            warn(f"--repository {repo}: gpualign takes the image's whole repository, where the GPU Operator splits "
                 f"it into repository and image (nvcr.io/nvidia + driver): the images would read {repo}:TAG; if "
                 f"{repo} is the operator's repository, pass {repo}/driver")
        return repo
    for source in ledgers:
        if is_registry(source):
            from gpualign.ledger.references import parse_ref

            return parse_ref(source).image
    return NVIDIA_REPOSITORY
