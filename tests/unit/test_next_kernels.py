"""The kernel Debian's archive will install next on each line (gpualign.model.next_kernels), read from the
archive's own Packages stanzas (tests/data/debian-packages, recorded by scripts/record_debian_kernels.py) and held
to the listing recorded beside them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from debian.debian_support import Version
from hypothesis import given
from hypothesis import strategies as st

from gpualign.model import debian_kernels, next_kernels
from gpualign.model.makers import Maker, Reason, who_makes
from tests.support.debian_archive import OS_OF, kernels, listing, read_suites, table

DATA = Path(__file__).resolve().parent.parent / "data" / "debian-packages"
RELEASES = [("bookworm", "amd64"), ("bookworm", "arm64"), ("trixie", "amd64"), ("trixie", "arm64")]


@cache
def lines(release: str, arch: str) -> dict:
    indexes = {s: (DATA / f"{s}_{arch}.Packages").read_text() for s in read_suites(OS_OF[release])}
    return next_kernels.by_line(next_kernels.candidates(indexes).values())


@pytest.mark.parametrize(("release", "arch"), RELEASES)
def test_each_lines_next_kernel_is_its_metapackages_newest_dependency(release, arch):
    """From the listing alone: for each metapackage, the row of the highest version among the read suites names the
    ABI; the reader must agree, line by line."""
    rows = [r for r in listing() if r[0] in read_suites(OS_OF[release]) and r[1] == arch and r[4]]
    newest: dict[str, tuple[str, str]] = {}
    for _suite, _arch, package, version, depends in rows:
        if package not in newest or Version(version) > Version(newest[package][0]):
            newest[package] = (version, depends.removeprefix("linux-image-"))
    expected = {debian_kernels.parse(abi).line: abi for _v, abi in newest.values()}  # type: ignore[union-attr]
    got = {line: a.release for line, a in lines(release, arch).items()}
    assert got == expected


def test_the_archive_names_tonights_kernels():
    """What the recorded archive said, as apt would read it (bookworm-security's 6.1.0-57 over bookworm's 6.1.0-50,
    its own 6.12 line, trixie-security's 6.12.118)."""
    assert next_kernels.next_for("6.1.0-50-amd64", lines("bookworm", "amd64")).release == "6.1.0-57-amd64"
    assert next_kernels.next_for("6.1.0-53-cloud-arm64", lines("bookworm", "arm64")).release == \
        "6.1.0-57-cloud-arm64"
    assert next_kernels.next_for("6.12.111+deb12-amd64", lines("bookworm", "amd64")).release == \
        "6.12.118+deb12-amd64"
    found = next_kernels.next_for("6.12.115+deb13.1-amd64", lines("trixie", "amd64"))
    assert found is not None and found.release == "6.12.118+deb13-amd64" and found.suite == "trixie-security"
    assert found.metapackage == "linux-image-amd64"
    assert next_kernels.next_for("7.2.11+deb13-amd64", lines("trixie", "amd64")) is None  # backports' line


@given(st.sampled_from(kernels()))
def test_apt_never_moves_a_node_back_and_the_next_kernel_gets_its_kinds_decision(row):
    suite, arch, release = row
    base = suite.split("-")[0]
    nxt = next_kernels.next_for(release, lines(base, arch))
    if nxt is None:
        assert suite.endswith("-backports")  # only backports' lines have no metapackage in the suites read
        return
    assert nxt.kernel.line == debian_kernels.parse(release).line  # type: ignore[union-attr]
    if suite in read_suites(OS_OF[base]):
        assert nxt.kernel.abi >= debian_kernels.parse(release).abi  # type: ignore[union-attr]
    os_tag = OS_OF[base]
    branch = table().get(os_tag).branches[-1]  # type: ignore[union-attr]
    making = who_makes(os_tag, branch, nxt.release, arch, False, debian=table())
    want = (Reason.PREEMPT_RT if nxt.kernel.preempt_rt else Reason.PAGE_SIZE if nxt.kernel.pages else Reason.BUILDS)
    assert making.reason is want and (making.maker is Maker.BUILD) == (want is Reason.BUILDS)


def test_a_metapackage_of_another_shape_is_not_read_as_one():
    text = ("Package: linux-image-amd64-signed-template\nVersion: 1\nArchitecture: amd64\n\n"
            "Package: linux-image-amd64\nVersion: 6.1.192-3\nArchitecture: amd64\n"
            "Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)\n\n"
            "Package: linux-image-6.1.0-57-amd64\nVersion: 6.1.192-3\nArchitecture: amd64\n"
            "Depends: kmod, linux-base\n")
    (meta,) = next_kernels.metapackages(text, "bookworm-security")
    assert (meta.metapackage, meta.release, meta.version) == ("linux-image-amd64", "6.1.0-57-amd64", "6.1.192-3")
