"""The ledger's sweep (`gpualign build gc`): which images and shared-module artifacts no node needs. Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.ensure.sweep import image_kernel, modules_kernel, unused


def test_images_and_modules_of_kernels_no_node_runs_or_announces_go_and_nothing_else():
    images = {"535-6.1.0-47-amd64-debian12": "sha256:a", "535-6.1.0-50-amd64-debian12": "sha256:b",
              "535-6.12.117_deb13-amd64-debian13": "sha256:c", "latest": "sha256:d",
              "580-5.15.0-124-generic-ubuntu22.04": "sha256:e"}
    modules = {"535.261.03-6.1.0-47-amd64-proprietary": "sha256:m1", "535.261.03-6.1.0-50-amd64-open": "sha256:m2",
               "550.163.01-6.12.117_deb13-amd64-proprietary": "sha256:m3", "notes": "sha256:m4"}
    # a node runs 6.1.0-50; another announces the next kernel in the real release's spelling (with `+`)
    found = unused(images, modules, ["6.1.0-50-amd64", "6.12.117+deb13-amd64"])
    assert found.images == ("535-6.1.0-47-amd64-debian12", "580-5.15.0-124-generic-ubuntu22.04")
    assert found.modules == ("535.261.03-6.1.0-47-amd64-proprietary",)
    assert found.unknown == ("latest", "notes") and found.shared_digest == ()


def test_a_digest_a_kept_tag_names_is_never_deleted():
    """A registry deletes a manifest by digest, and every tag on it goes too."""
    images = {"535-6.1.0-47-amd64-debian12": "sha256:same", "535-6.1.0-50-amd64-debian12": "sha256:same",
              "535-6.1.0-40-amd64-debian12": None}
    found = unused(images, {}, ["6.1.0-50-amd64"])
    assert found.images == () and found.shared_digest == ("535-6.1.0-40-amd64-debian12",
                                                          "535-6.1.0-47-amd64-debian12")


def test_kernels_are_read_from_either_kind_of_tag():
    assert image_kernel("535-6.12.117_deb12-amd64-debian12") == "6.12.117+deb12-amd64"  # the release
    assert image_kernel("latest") is None
    assert modules_kernel("535.261.03-6.1.0-50-amd64-open") == "6.1.0-50-amd64"
    assert modules_kernel("notes") is None


@given(st.dictionaries(st.sampled_from([f"535-6.1.0-{n}-amd64-debian12" for n in range(40, 50)] + ["x", "y"]),
                       st.sampled_from(["sha256:1", "sha256:2", "sha256:3", None])),
       st.sets(st.sampled_from([f"6.1.0-{n}-amd64" for n in range(40, 50)])))
def test_nothing_in_use_goes_and_every_tag_is_accounted_for_once(images, kernels):
    found = unused(images, {}, kernels)
    for tag in found.images:
        assert image_kernel(tag) not in kernels
        assert all(images[other] != images[tag] for other in images if other not in found.images)
    listed = [*found.images, *found.shared_digest, *found.unknown]
    assert len(listed) == len(set(listed))
    kept_in_use = [t for t in images if image_kernel(t) in kernels]
    assert sorted([*listed, *kept_in_use]) == sorted(images)
