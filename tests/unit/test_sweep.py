"""The ledger's sweep (`gpualign build gc`): which images and shared-module artifacts no node needs. Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.ensure.sweep import image_kernel, line_of, modules_kernel, unused
from gpualign.model.kernels import label_of
from tests.support import debian_archive


def test_images_and_modules_of_kernels_no_node_needs_go_and_nothing_else():
    images = {"535-6.1.0-47-amd64-debian12": "sha256:a", "535-6.1.0-49-amd64-debian12": "sha256:f",
              "535-6.1.0-50-amd64-debian12": "sha256:b", "535-6.12.117_deb13-amd64-debian13": "sha256:c",
              "latest": "sha256:d", "580-5.15.0-124-generic-ubuntu22.04": "sha256:e",
              "580-5.15.0-122-generic-ubuntu22.04": "sha256:g"}
    modules = {"535.261.03-6.1.0-47-amd64-proprietary": "sha256:m1", "535.261.03-6.1.0-49-amd64-open": "sha256:m5",
               "535.261.03-6.1.0-50-amd64-open": "sha256:m2",
               "550.163.01-6.12.117_deb13-amd64-proprietary": "sha256:m3", "notes": "sha256:m4"}
    # a node runs 6.1.0-50; another announces the next kernel in the real release's spelling (with `+`)
    found = unused(images, modules, ["6.1.0-50-amd64", "6.12.117+deb13-amd64"])
    # 6.1.0-49 is 6.1.0-50's fallback; 5.15.0-124 the newest of a line no node runs (a pool scaled to zero)
    assert found.images == ("535-6.1.0-47-amd64-debian12", "580-5.15.0-122-generic-ubuntu22.04")
    assert found.modules == ("535.261.03-6.1.0-47-amd64-proprietary",)
    assert found.unknown == ("latest", "notes") and found.shared_digest == ()
    assert dict(found.kept) == {"535-6.1.0-49-amd64-debian12": "fallback",
                                "580-5.15.0-124-generic-ubuntu22.04": "newest of its line",
                                "535.261.03-6.1.0-49-amd64-open": "fallback"}
    assert unused(images, {}, ["6.1.0-50-amd64"], keep_previous=0).images == (
        "535-6.1.0-47-amd64-debian12", "535-6.1.0-49-amd64-debian12",
        "580-5.15.0-122-generic-ubuntu22.04")  # no fallback; 6.12.117, no longer announced, is its line's newest


def test_a_digest_a_kept_tag_names_is_never_deleted():
    """A registry deletes a manifest by digest, and every tag on it goes too."""
    images = {"535-6.1.0-47-amd64-debian12": "sha256:same", "535-6.1.0-50-amd64-debian12": "sha256:same",
              "535-6.1.0-40-amd64-debian12": None}
    found = unused(images, {}, ["6.1.0-50-amd64"], keep_previous=0)
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
    listed = [*found.images, *found.shared_digest, *found.unknown, *(t for t, _ in found.kept)]
    assert len(listed) == len(set(listed))
    kept_in_use = [t for t in images if image_kernel(t) in kernels]
    assert sorted([*listed, *kept_in_use]) == sorted(images)


def _recorded_lines() -> dict[tuple[str, ...], list[tuple[str, str]]]:
    """Every kernel ABI Debian's archive carries (tests/data), by line: (release, its headers' package version)."""
    lines: dict[tuple[str, ...], dict[str, str]] = {}
    for _suite, _arch, package, version, _ in debian_archive.listing():
        release = package.removeprefix("linux-headers-")
        if (_suite, _arch, release) in _ABIS:
            found = line_of(release)
            assert found is not None, f"{release}: a kernel Debian ships has no line"
            lines.setdefault(found[0], {})[release] = version
    return {line: sorted(members.items()) for line, members in lines.items()}


_ABIS = set(debian_archive.kernels())
_LINES = _recorded_lines()


def test_every_recorded_line_orders_its_kernels_as_apt_orders_their_packages():
    """A line's order (the fallback, the newest) is Debian's: the headers packages' versions, as apt compares them."""
    from debian.debian_support import Version

    for line, members in _LINES.items():
        by_abi = sorted(members, key=lambda m: line_of(m[0])[1])  # type: ignore[index]
        by_apt = sorted(members, key=lambda m: Version(m[1]))
        assert [r for r, _ in by_abi] == [r for r, _ in by_apt], line


@given(st.data())
def test_on_the_archives_kernels_the_sweep_keeps_each_line_newest_and_each_fallback(data):
    line = data.draw(st.sampled_from(sorted(_LINES)))
    members = [r for r, _ in sorted(_LINES[line], key=lambda m: line_of(m[0])[1])]  # type: ignore[index]
    ledger = data.draw(st.lists(st.sampled_from(members), min_size=1, unique=True))
    live = data.draw(st.lists(st.sampled_from(members), unique=True))
    offered = data.draw(st.lists(st.sampled_from(members), max_size=1))  # the archive's next, where it was read
    images = {f"550-{label_of(k)}-debian13": f"sha256:{k}" for k in ledger}
    found = unused(images, {}, live, offered=offered)
    kept = {image_kernel(t) for t in images if t not in found.images}
    in_ledger = [k for k in members if k in ledger]
    assert in_ledger[-1] in kept  # the newest: a pool scaled to zero, or the archive's next
    for k in offered:
        if k in ledger:
            assert k in kept  # what the archive offers next stays, wherever it is in the line
            assert (f"550-{label_of(k)}-debian13", "offered next") in found.kept or k in live
    for k in live:
        assert k not in {image_kernel(t) for t in found.images}
        before = [o for o in in_ledger if members.index(o) < members.index(k)]
        if before:
            assert before[-1] in kept  # its fallback
    allowed = set(live) | set(offered) | {in_ledger[-1]} | {
        [o for o in in_ledger if members.index(o) < members.index(k)][-1]
        for k in live if any(members.index(o) < members.index(k) for o in in_ledger)}
    assert kept <= allowed  # and nothing else stays


def test_signatures_attestations_and_sboms_go_with_their_image_and_stay_with_a_kept_one():
    """cosign's tags (`sha256-<hex>.sig|.att|.sbom`) beside an image: never a kernel to judge, never kept forever."""
    from gpualign.model.cosign import attached_to, signature_tag

    gone, kept, earlier = (f"sha256:{c * 64}" for c in "abc")
    images = {"535-6.1.0-47-amd64-debian12": gone, "535-6.1.0-50-amd64-debian12": kept,
              **{signature_tag(d, s): f"sha256:{s}{d[-4:]}" for d in (gone, kept) for s in ("sig", "att", "sbom")},
              signature_tag(earlier): "sha256:orphan"}  # its image went in an earlier sweep
    shared_modules = f"sha256:{'d' * 64}"
    modules = {"535.261.03-6.1.0-47-amd64-proprietary": shared_modules, signature_tag(shared_modules): None}
    found = unused(images, modules, ["6.1.0-50-amd64"], keep_previous=0)
    assert found.images == ("535-6.1.0-47-amd64-debian12",) and found.unknown == ()
    assert found.attachments == (
        ("images", signature_tag(gone, "att")), ("images", signature_tag(gone, "sbom")),
        ("images", signature_tag(gone)), ("images", signature_tag(earlier)))
    # the modules' artifact is its line's newest: kept, and its signature with it
    assert found.modules == () and ("modules", signature_tag(shared_modules)) not in found.attachments
    assert attached_to(signature_tag(kept)) == kept and attached_to("sha256-abc.sig") is None
    assert attached_to("535-6.1.0-47-amd64-debian12") is None and attached_to(f"sha256-{'g' * 64}.sig") is None
