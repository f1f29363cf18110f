"""The shared user-space image's name: the same inputs name the same tag on every machine, and any input that
changes what the layer holds names another."""

from __future__ import annotations

from gpualign.ensure import image, shared_userspace

PACKAGES = {"libcuda1": "535.309.01-0+deb12u1", "nvidia-smi": "535.309.01-0+deb12u1"}


def test_a_user_space_tag_names_its_release_architecture_version_and_inputs_and_nothing_of_the_machine():
    tag = image.userspace_tag("bookworm", "amd64", "535.309.01", PACKAGES)
    assert tag.startswith("bookworm-amd64-535.309.01-") and len(tag.rsplit("-", 1)[1]) == 12
    assert image.userspace_tag("bookworm", "amd64", "535.309.01", dict(reversed(PACKAGES.items()))) == tag
    others = {image.userspace_tag("bookworm", "arm64", "535.309.01", PACKAGES),
              image.userspace_tag("trixie", "amd64", "535.309.01", PACKAGES),
              image.userspace_tag("bookworm", "amd64", "535.309.01", {**PACKAGES, "nvidia-smi": "535.309.01-1"}),
              shared_userspace.tag("bookworm", "amd64", "535.309.01", PACKAGES, "another-recipe")}
    assert tag not in others and len(others) == 4
    assert image.userspace_name("bookworm", "amd64", "535.309.01", PACKAGES) == \
        f"localhost/gpualign-driver-userspace:{tag}"
    assert shared_userspace.repository("nvidia/driver") == "nvidia/driver-userspace"
