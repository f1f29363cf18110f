"""A kernel's two spellings (gpualign/model/kernels.py): the release uname -r names, and the label NFD publishes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.model.kernels import Kernel, candidates, label_of, release_of


def test_debians_plus_kernels_read_back_from_their_labels():
    assert label_of("6.12.117+deb13-amd64") == "6.12.117_deb13-amd64"
    assert release_of("6.12.117_deb13-amd64") == "6.12.117+deb13-amd64"
    assert release_of("6.12.117_deb12-cloud-amd64") == "6.12.117+deb12-cloud-amd64"
    assert release_of("6.12.12_bpo-rt-arm64") == "6.12.12+bpo-rt-arm64"


def test_kernels_spelled_alike_and_real_underscores_are_left_alone():
    for kernel in ("6.1.0-50-amd64", "5.15.0-124-generic", "6.8.0-1017-azure", "5.14.0-427.37.1.el9_4.x86_64"):
        assert release_of(kernel) == kernel == label_of(kernel)
        assert not Kernel.from_label(kernel).spelled_twice


def test_a_nodes_own_release_wins_where_its_label_is_its_spelling():
    assert Kernel.from_node("6.12.117_deb13-amd64", "6.12.117+deb13-amd64") == \
        Kernel("6.12.117+deb13-amd64", "6.12.117_deb13-amd64")
    # a label NFD has not rewritten yet after a reboot: the label is what the tag is made of, and is read alone
    assert Kernel.from_node("6.1.0-50-amd64", "6.12.117+deb12-amd64") == Kernel("6.1.0-50-amd64", "6.1.0-50-amd64")
    assert Kernel.from_node(None, "6.12.117+deb13-amd64") == Kernel("6.12.117+deb13-amd64", "6.12.117_deb13-amd64")
    assert Kernel.from_node(None, None) is None


def test_candidates_from_an_archive():
    releases = ["6.12.117+deb12-amd64", "6.1.0-50-amd64", "6.12.117+deb12-cloud-amd64"]
    assert candidates("6.12.117_deb12-amd64", releases) == ["6.12.117+deb12-amd64"]
    assert candidates("6.12.117_deb12-arm64", releases) == []


@given(st.from_regex(r"[0-9]\.[0-9]{1,2}\.[0-9]{1,3}\+(deb1[23]|bpo)-(cloud-|rt-)?(amd64|arm64)", fullmatch=True))
def test_a_debian_release_survives_the_trip_through_its_label(release):
    assert release_of(label_of(release)) == release


def test_a_kernel_or_a_tag_finds_its_debian_release():
    """Debian 13's kernels are built, checked and imaged from trixie, Debian 12's (6.1 and 6.12) from bookworm."""
    from gpualign.archive.apt import Archive
    from gpualign.ensure import image
    from gpualign.model.driver_tag import parse

    assert Archive.for_kernel("6.12.118+deb13-amd64").suite == "trixie"
    assert Archive.for_kernel("6.12.118_deb13-amd64").suite == "trixie"  # NFD's spelling too
    assert Archive.for_kernel("6.12.118+deb12-amd64").suite == "bookworm"
    assert Archive.for_kernel("6.1.0-50-amd64").suite == "bookworm"
    assert Archive(mirror="http://mirror.local/debian").for_spec("debian13").mirror == "http://mirror.local/debian"
    assert image.suite_of(parse("550-6.12.118_deb13-amd64-debian13")) == "trixie"
    assert "libtirpc3t64" in image.base_packages("trixie") and "libtirpc3" in image.base_packages("bookworm")
    assert image.base_name("bookworm") == image.BASE != image.base_name("trixie")


def test_the_debian_release_a_kernel_is_built_for_in_either_spelling():
    from gpualign.model.kernels import debian_release

    assert debian_release("6.12.117+deb13-amd64") == debian_release("6.12.117_deb13-cloud-amd64") == "13"
    assert debian_release("6.12.117_deb12-amd64") == "12"
    assert debian_release("6.12.12+bpo-amd64") == "12"  # bookworm-backports
    assert debian_release("6.1.0-50-amd64") is None and debian_release("5.14.0-427.37.1.el9_4.x86_64") is None
