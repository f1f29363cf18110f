"""The CUDA version a workload image was built for, read from its config in its registry (the CUDA_VERSION its
base image sets): what `gpualign cuda check --image` takes as the fleet's floor. Refusals say what is wrong with
the image; the command line says which flag named it."""

from __future__ import annotations

from pathlib import Path

from gpualign.base.errors import BadInput
from gpualign.ledger.registry import config_env, connect
from gpualign.model.image_ref import ImageRef


class ImageUnusable(BadInput):
    """The image names no CUDA version: `why` says so, in one line, without the flag that named it."""

    def __init__(self, ref: str, why: str) -> None:
        super().__init__(f"{ref}: {why}")
        self.ref, self.why = ref, why


class NoCudaVersion(ImageUnusable):
    """The image's config sets no CUDA_VERSION."""


def cuda_of_image(ref: str, docker_config: Path | None = None) -> str:
    """HOST/REPO:TAG (registry:// or oci:// optional) -> its config's CUDA_VERSION."""
    text = ref.removeprefix("registry://").removeprefix("oci://")
    parsed = ImageRef.parse(text)
    name, tag = parsed.name, parsed.tag
    if not tag or parsed.digest or "/" not in name:
        raise ImageUnusable(repr(ref), "expected HOST/REPO:TAG")
    with connect(f"registry://{name}", docker_config=docker_config) as client:
        config = client.image_config(tag)
    if config is None:
        raise ImageUnusable(ref, "not found in the registry")
    version = config_env(config).get("CUDA_VERSION")
    if not version:
        raise NoCudaVersion(ref, "its config sets no CUDA_VERSION")
    return version
