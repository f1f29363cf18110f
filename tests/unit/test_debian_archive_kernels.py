"""Every kernel Debian's archive publishes, read as gpualign reads it: one decision per headers package, the same in
check, plan, ensure and the build trigger.

The kernels are the archive's own (tests/data/debian-kernels.tsv, recorded by scripts/record_debian_kernels.py from
the main Packages index of bookworm and trixie with their -updates, -security and -backports suites, amd64 and
arm64), not examples made up here. What each kernel should get is said from the listing's facts alone: the suite
that carries it, its variant and its page size.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.cli.plan import matrix
from gpualign.controller.build_trigger.trigger import BUILDABLE
from gpualign.judging import tagspec
from gpualign.ledger.sources import Ledger
from gpualign.loaders.rules import load_rules
from gpualign.model import debian_kernels, driver_tag
from gpualign.model.audit import AuditInput, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.facts import node_facts
from gpualign.model.fleet_report import ClusterRead, merge_plan
from gpualign.model.kernels import Kernel, debian_release, label_of, release_of
from gpualign.model.makers import Maker, Reason, who_makes
from gpualign.model.needed_images import Change, images_needed
from tests.support import builders
from tests.support.debian_archive import OS_OF, kernels, read_suites, rules, table


def expected(suite: str, release: str) -> Reason:
    """What a kernel should get, from the listing's facts alone."""
    os_tag = OS_OF[suite.split("-")[0]]
    parsed = debian_kernels.parse(release)
    assert parsed is not None
    dt = table().get(os_tag)
    assert dt is not None
    if parsed.series not in dt.series:
        return Reason.SERIES
    if "-rt-" in release:
        return Reason.PREEMPT_RT
    if release.endswith("-16k"):
        return Reason.PAGE_SIZE
    carried = {r for s, _a, r in kernels() if s in read_suites(os_tag)}
    if release not in carried:
        return Reason.NO_HEADERS  # backports' only: an ABI the read suites do not carry, older than theirs
    return Reason.BUILDS


def test_the_listing_is_the_archives_and_covers_every_kind():
    """Both releases and architectures, every variant, a point-release ABI and the page-size flavour are there."""
    releases = {r for _s, _a, r in kernels()}
    assert {s for s, _a, _r in kernels()} >= {"bookworm", "bookworm-security", "trixie", "trixie-security"}
    assert {a for _s, a, _r in kernels()} == {"amd64", "arm64"}
    assert any("+deb13.1-" in r for r in releases) and any(r.startswith("6.1.0-") for r in releases)
    for part in ("-cloud-amd64", "-rt-amd64", "-cloud-arm64", "-rt-arm64", "-arm64-16k"):
        assert any(r.endswith(part) for r in releases), part


def test_every_kernel_debian_publishes_is_read_by_its_parts():
    for suite, arch, release in kernels():
        parsed = debian_kernels.parse(release)
        assert parsed is not None, release
        assert parsed.arch == arch and Kernel.of(release).arch == arch and Kernel.of(label_of(release)).arch == arch
        assert release_of(label_of(release)) == release  # NFD's label reads back to the release
        named = OS_OF[suite.split("-")[0]].removeprefix("debian")
        assert parsed.built_for in (named, None)


def test_every_kernel_debian_publishes_is_one_value_in_either_spelling():
    """A release, its NFD label and the tag's kernel are one Kernel: the same names, architecture and parts."""
    for _suite, arch, release in kernels():
        label = label_of(release)
        values = {Kernel.of(release), Kernel.of(label), Kernel.from_label(label),
                  driver_tag.parse(f"535-{label}-debian12").kernel_value}
        assert values == {Kernel(release, label)}, release
        kernel = Kernel.of(label)
        assert kernel.arch == kernel.arch_or_amd64 == arch and kernel.debian == debian_kernels.parse(release)
        assert kernel.names(release) and kernel.names(label) and kernel.built_for == debian_release(release)
        assert not kernel.names(f"{release}x")


@pytest.mark.parametrize(("suite", "arch", "release"), kernels())
def test_each_kernel_gets_one_decision_everywhere(suite, arch, release):
    """check's ACTION, plan's action, ensure --dry-run and the build trigger agree, for every branch the release
    builds and both module flavours."""
    os_tag = OS_OF[suite.split("-")[0]]
    want = expected(suite, release)
    release_ = table().get(os_tag)
    assert release_ is not None
    label = label_of(release)
    for branch in release_.branches:
        making = who_makes(os_tag, branch, label, arch, False, debian=table())
        assert making.reason is want, (release, making.why)
        assert (making.maker is Maker.BUILD) == (want is Reason.BUILDS)
        assert "\n" not in making.why and release in making.why or making.maker is Maker.BUILD
        tag = f"{branch}-{label}-{os_tag}"
        # ensure --dry-run: builds exactly what the decision builds, and refuses the rest with its reason
        if want is Reason.BUILDS:
            assert tagspec.buildable_here(driver_tag.parse(tag), arch, debian=table()) == release_.suite
        else:
            with pytest.raises(BadInput, match="kernel"):
                tagspec.buildable_here(driver_tag.parse(tag), arch, debian=table())
        # check: the node running it; the build trigger makes a Job for check's action
        node = node_facts(builders.node("n", kernel=label, os_id="debian", os_version=os_tag[-2:], arch=arch))
        (finding,) = audit(AuditInput([node], Ledger(frozenset(), ("t",)), rules(), BranchPolicy(default=branch),
                                      repository="r/nvidia/driver")).findings
        assert finding.tag == tag and finding.action == making.maker
        assert (str(finding.action) in BUILDABLE) == (want is Reason.BUILDS)
        # plan: a node of the same line planned onto it
        planned = images_needed([node], Change(kernel=release), Ledger(frozenset(), ("t",)), rules(),
                                BranchPolicy(default=branch))
        if planned.unknown:  # plan refuses the change itself (a line the release does not ship), naming why
            ((_, why),) = planned.unknown
            assert want is not Reason.BUILDS and release in why
            continue
        (needed,) = planned.needed
        assert needed.tag == tag and needed.action == making.maker and needed.making.reason is want
        report = planned.as_dict()  # plan -o json never contradicts itself
        (entry,) = report["needed"]
        if want is Reason.BUILDS:
            assert report["to_build"] == [tag] and report["cannot_make"] == []
        else:
            assert report["to_build"] == [] and report["cannot_make"] == [
                {"tag": tag, "reason": making.why, "kind": str(want)}]
            assert "in-house" not in entry["reason"] and making.why in entry["reason"]
        # plan --all-contexts: a fleet of one cluster says what that cluster's plan says, matrix included
        fleet = merge_plan([ClusterRead("c", "https://c", report)])
        assert (fleet["to_build"], fleet["cannot_make"]) == (report["to_build"], report["cannot_make"])
        assert matrix(fleet["needed"]) == matrix(report["needed"])


@settings(max_examples=200)
@given(st.sampled_from(kernels()), st.sampled_from(["535", "550", "580", "470"]), st.sampled_from(["open",
                                                                                                   "proprietary"]))
def test_a_kernel_refused_for_itself_is_refused_for_every_branch_and_flavour(row, branch, flavour):
    """A kernel's own refusal (rt, page size, line, headers) comes first: the same reason whatever the branch."""
    suite, arch, release = row
    os_tag = OS_OF[suite.split("-")[0]]
    want = expected(suite, release)
    making = who_makes(os_tag, branch, label_of(release), arch, False, debian=table(), flavour=flavour)
    if want is not Reason.BUILDS:
        assert making.reason is want
        return
    release_table = table().get(os_tag)
    assert release_table is not None
    carried = [int(b) for b in release_table.carried]
    if branch in release_table.branches:  # built from Debian's source, or its open modules refused
        assert making.reason in (Reason.BUILDS, Reason.OPEN_MODULES)
    elif int(branch) > max(carried):  # newer than Debian carries: NVIDIA's own repository's recipe
        assert making.reason is Reason.NVIDIA_REPOSITORY and making.maker == "render"
        assert "developer.download.nvidia.com/compute/cuda/repos/" + os_tag in making.why
    else:
        assert making.reason is Reason.BRANCH


def test_a_kernel_later_than_the_reading_is_built_and_one_that_left_the_archive_is_refused():
    """The archive is read when ensure last ran: a later ABI may have been published since, and ensure reads the
    archive again before it builds; an earlier ABI absent from it has left the archive."""
    later = who_makes("debian12", "535", "6.1.0-99-amd64", "amd64", False, debian=table())
    assert later.maker is Maker.BUILD
    gone = who_makes("debian12", "535", "6.1.0-44-amd64", "amd64", False, debian=table())
    assert gone.reason is Reason.NO_HEADERS and "snapshot.debian.org" in gone.why
    unread = who_makes("debian12", "535", "6.1.0-44-amd64", "amd64", False,
                       debian=load_rules(archive_reading=False).debian)
    assert unread.maker is Maker.BUILD  # nothing read: nothing claimed


def test_the_review_kernels():
    """The kernels review 5 named, by their labels."""
    point = who_makes("debian13", "550", "6.12.115_deb13.1-amd64", "amd64", False, debian=table())
    assert point.maker is Maker.BUILD
    assert driver_tag.parse("550-6.12.115_deb13.1-amd64-debian13").kernel == "6.12.115+deb13.1-amd64"
    rt = who_makes("debian13", "550", "6.12.116_deb13-rt-amd64", "amd64", False, debian=table())
    assert rt.reason is Reason.PREEMPT_RT and "run GPU nodes on 6.12.116+deb13-amd64" in rt.why
    assert who_makes("debian12", "535", "6.1.0-57-rt-amd64", "amd64", False, debian=table()).reason \
        is Reason.PREEMPT_RT
    sixteen = who_makes("debian13", "550", "6.12.118_deb13-arm64-16k", "arm64", False, debian=table())
    assert sixteen.reason is Reason.PAGE_SIZE
