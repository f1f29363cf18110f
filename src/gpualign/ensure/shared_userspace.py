"""The driver image's user-space layers shared through the ledger's registry, so a build on an empty disk takes them
instead of fetching NVIDIA's user space from Debian and making the layer again.

Every kernel's image of one Debian release, architecture and driver version is its modules' layer over the same
image: the base, then NVIDIA's user space with `nvidia-driver` and the ld.so.cache (`image.userspace_image`). That
image is pushed once, beside the ledger, in the repository `<ledger repository>-userspace` (the ledger's own tags
stay driver images), tagged by what it is made of:

    <suite>-<arch>-<driver version>-<key>            e.g. bookworm-amd64-535.309.01-5d0c1f9a2b3e

where the key is a digest of the base's recipe, the image's layout (the nvidia-driver script, the user-space
recipe) and the Debian version of each user-space package. A build that has no such image locally pulls it by
that tag; a driver image made over it then shares its layers with every other kernel's in the registry, and its
push sends only its modules' layer.

What a pulled layer is trusted for: nothing more than a fetched one. The image assembled over it has its user
space checked in its own tree exactly as every image's is (`userspace.check`: each soname's file at the modules'
version, the ld.so.cache, `nvidia-smi -h`'s version, `nvidia-persistenced --version`) before anything is pushed.
Who may push to the ledger's registry may push driver images too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpualign.ledger.registry import RegistryClient


def repository(ledger_repo: str) -> str:
    """Where a ledger's shared user-space images live: beside its images, never among its tags."""
    return f"{ledger_repo}-userspace"


def tag(suite: str, arch: str, driver_version: str, packages: Mapping[str, str], recipe: str) -> str:
    """recipe: what else the image is made of (the base's recipe key and the image's layout)."""
    digest = hashlib.sha256(repr((recipe, sorted(packages.items()))).encode()).hexdigest()[:12]
    return f"{suite}-{arch}-{driver_version}-{digest}"


def reference(client: RegistryClient, name: str) -> str:
    return f"{client.ref.host}/{repository(client.ref.repo)}:{name}"


def has(client: RegistryClient, name: str) -> bool:
    return client.digest(name, repository(client.ref.repo)) is not None
