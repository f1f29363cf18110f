"""Who makes an image (gpualign.model.makers): one decision that check, plan, ensure and the build trigger share, and
the platform check of a present image against the node's kubernetes.io/arch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.judging import tagspec
from gpualign.ledger.sources import Ledger
from gpualign.loaders.rules import load_rules
from gpualign.model import driver_tag
from gpualign.model.audit import AuditInput, Status, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.facts import node_facts
from gpualign.model.kernels import Kernel
from gpualign.model.makers import JOB_MAKERS, DebianTable, Maker, sources_from, who_makes
from gpualign.model.platforms import platform_problem
from gpualign.model.tags import os_tag, required_image
from tests.support import builders

RULES = load_rules(archive_reading=False)  # the rules' copy of Debian's archives: the same on every machine
DEBIAN = RULES.debian


def node(name: str, kernel: str, os_id: str, version: str, arch: str | None = None):
    return node_facts(builders.node(name, kernel=kernel, os_id=os_id, os_version=version, arch=arch))


@pytest.mark.parametrize(("os_tag_", "branch", "kernel", "arch", "maker", "words"), [
    ("debian12", "535", "6.1.0-50-amd64", "amd64", Maker.BUILD, "Debian bookworm's NVIDIA 535"),
    ("debian12", "580", "6.1.0-50-amd64", "amd64", Maker.RENDER, "carries NVIDIA 470, 525, 535, not 580"),
    ("debian13", "580", "6.12.118_deb13-arm64", "arm64", Maker.RENDER,
     "from NVIDIA's own Debian 13 repository (https://developer.download.nvidia.com/compute/cuda/repos/debian13/sbsa/)"),
    ("debian12", "470", "6.1.0-50-amd64", "amd64", Maker.NONE,
     "carries NVIDIA 470 only as nvidia-tesla-470-kernel-source 470.256.02, which gpualign does not build from"),
    ("debian12", "535", "6.1.0-50-amd64", "arm64", Maker.NONE, "is an amd64 kernel, but the node is arm64"),
    ("debian12", "535", "6.1.0-50-arm64", "arm64", Maker.BUILD, "from Debian bookworm's NVIDIA 535"),
    ("debian13", "550", "6.12.118_deb13-arm64", "arm64", Maker.BUILD, "from Debian trixie's NVIDIA 550"),
    ("debian12", "535", "6.1.0-50-powerpc64le", "ppc64le", Maker.NONE, "for amd64, arm64, not ppc64le"),
    ("debian12", "535", "6.1.0-50-riscv64", None, Maker.NONE, "for amd64, arm64, not riscv64"),
    ("debian13", "550", "6.12.117_deb13-amd64", "amd64", Maker.BUILD, "Debian trixie's NVIDIA 550"),
    ("debian13", "535", "6.12.117_deb13-amd64", "amd64", Maker.NONE,
     "Debian trixie carries NVIDIA 535 only as nvidia-tesla-535-kernel-source 535.274.02"),
    ("debian13", "580", "6.12.117_deb13-amd64", "amd64", Maker.RENDER,
     "Debian trixie carries NVIDIA 535, 550, not 580"),
    ("debian13", "550", "6.12.117_deb12-amd64", "amd64", Maker.NONE, "is Debian 12's, not debian13's"),
    ("debian14", "550", "6.12.117_deb14-amd64", "amd64", Maker.NONE, "does not build debian14 yet"),
    # Debian 12's 6.12 kernels (bookworm-security, backports): never a build Job that can only fail at its headers
    ("debian12", "535", "6.12.117_deb12-amd64", "amd64", Maker.BUILD, "Debian bookworm's NVIDIA 535"),
    ("debian12", "535", "6.12.117+deb12-amd64", "amd64", Maker.BUILD, "Debian bookworm's NVIDIA 535"),
    ("debian12", "535", "6.12.117_deb13-amd64", "amd64", Maker.NONE, "is Debian 13's, not debian12's"),
    ("debian12", "535", "6.12.12_bpo-amd64", "amd64", Maker.NONE, "(6.12.12+bpo-amd64) is a backports kernel"),
    ("debian12", "535", "6.1.0-50-cloud-amd64", "amd64", Maker.BUILD, "Debian bookworm's NVIDIA 535"),
    ("debian13", "550", "6.12.118_deb13-arm64-16k", "arm64", Maker.NONE,
     "uses 16K pages, which NVIDIA's driver does not support on arm64"),
    ("ubuntu22.04", "580", "6.5.0-45-generic", "amd64", Maker.RENDER, "renders its recipe for amd64"),
    ("ubuntu22.04", "580", "6.8.0-1013-nvidia-64k", None, Maker.RENDER, "for arm64"),
    ("ubuntu20.04", "580", "5.4.0-100-generic", "amd64", Maker.NONE, "no recipe for ubuntu20.04"),
    ("rhel9.4", "580", "5.14.0-427.37.1.el9_4.x86_64", "amd64", Maker.RENDER, "renders"),
    ("sles15", "580", "5.14.21-150500-default", "amd64", Maker.NONE, "no recipe for sles15"),
])
def test_who_makes_each_kind_of_image(os_tag_, branch, kernel, arch, maker, words):
    making = who_makes(os_tag_, branch, kernel, arch, False, debian=DEBIAN)
    assert making.maker is maker and words in making.why


def test_a_re_uploads_abi_is_a_debian_kernel_whose_headers_left_the_archive():
    """Review 6's Low: 6.12.74+deb13+1-amd64 (package 6.12.74-2) is Debian's, read back from NFD's spelling; with the
    archive read to carry a later ABI of its line, its headers have left the archive, as ensure finds."""
    import dataclasses

    from gpualign.model.debian_kernels import parse
    from gpualign.model.kernels import release_of

    assert release_of("6.12.74_deb13_1-amd64") == "6.12.74+deb13+1-amd64"
    first, again = parse("6.12.74+deb13-amd64"), parse("6.12.74+deb13+1-amd64")
    assert first is not None and again is not None and again.line == first.line and again.abi > first.abi
    trixie = DEBIAN.get("debian13")
    assert trixie is not None
    read = DebianTable((("debian13", dataclasses.replace(
        trixie, headers=frozenset({"6.12.118+deb13-amd64"}), headers_read="2026-12-05")),))
    making = who_makes("debian13", "550", "6.12.74_deb13_1-amd64", "amd64", False, debian=read)
    assert making.maker is Maker.NONE and "not a Debian kernel release" not in making.why
    assert "no linux-headers-6.12.74+deb13+1-amd64 in Debian trixie" in making.why and "left the archive" in \
        making.why


def test_published_is_mirrored_and_only_build_and_mirror_get_jobs():
    assert who_makes("ubuntu22.04", "580", "5.15.0-124-generic", "amd64", True, debian=DEBIAN).maker is Maker.MIRROR
    assert {Maker.BUILD, Maker.MIRROR} == JOB_MAKERS


def test_kernel_names_their_architecture():
    assert Kernel.of("6.1.0-50-amd64").arch == "amd64" and Kernel.of("6.1.0-50-cloud-arm64").arch == "arm64"
    assert Kernel.of("5.14.0-427.37.1.el9_4.aarch64").arch == "arm64" and Kernel.of("5.15.0-124-generic").arch is None


KERNELS = st.sampled_from(["6.1.0-50-amd64", "6.1.0-47-cloud-amd64", "6.1.0-50-arm64", "6.12.117_deb13-amd64",
                           "5.15.0-124-generic", "6.8.0-1015-gcp", "6.8.0-1013-nvidia-64k"])
OSES = st.sampled_from([("debian", "12"), ("debian", "13"), ("ubuntu", "22.04"), ("ubuntu", "24.04"),
                        ("rhel", "9.4"), ("sles", "15")])


@given(KERNELS, OSES, st.sampled_from(["470", "525", "535", "550", "580"]), st.sampled_from(["amd64", "arm64"]))
def test_check_never_says_build_for_a_tag_ensure_refuses(kernel, os_, branch, arch):
    """check's ACTION and ensure's refusal come from one decision: `build` in check is a tag ensure builds."""
    facts = node("n", kernel, *os_, arch)
    req = required_image(facts, branch, RULES)
    assert req.tag is not None
    making = who_makes(req.os_tag or "", branch, kernel, arch, req.published, debian=DEBIAN)
    spec = driver_tag.parse(req.tag)
    if making.maker is Maker.BUILD:
        release = DEBIAN.get(req.os_tag or "")
        assert release is not None and tagspec.buildable_here(spec, arch, debian=DEBIAN) == release.suite
        assert release.version(branch) is not None  # and the release's archive has its module source
    elif making.maker is not Maker.MIRROR:
        with pytest.raises(BadInput):
            tagspec.buildable_here(spec, arch, debian=DEBIAN)


def test_an_amd64_only_image_is_wrong_for_an_arm64_node_and_right_for_an_amd64_one():
    """The review's GH200 case: the tag is present, its manifest holds only linux/amd64."""
    tag = "580-5.15.0-124-generic-ubuntu22.04"
    ledger = Ledger(frozenset({tag}), ("registry://r/nvidia/driver",))
    nodes = [node("gh200", "5.15.0-124-generic", "ubuntu", "22.04", "arm64"),
             node("x86", "5.15.0-124-generic", "ubuntu", "22.04", "amd64"),
             node("no-label", "5.15.0-124-generic", "ubuntu", "22.04")]
    image = f"r/nvidia/driver:{tag}"
    result = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(default="580"), repository="r/nvidia/driver",
                              platforms={image: ("amd64",)}))
    by = {f.name: f for f in result.findings}
    assert by["gh200"].status == Status.WRONG_IMAGE
    assert f"no linux/arm64 in {tag} (it holds linux/amd64)" in by["gh200"].reason
    assert by["x86"].status == Status.PRESENT
    assert by["no-label"].status == Status.PRESENT  # a node without the label is amd64
    both = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(default="580"), repository="r/nvidia/driver",
                            platforms={image: ("amd64", "arm64")}))
    assert {f.status for f in both.findings} == {Status.PRESENT}
    assert platform_problem(image, "arm64", {}) is None  # platforms not read: nothing claimed


def test_a_missing_render_image_says_so_and_names_the_command():
    facts = node("gcp", "6.8.0-1015-gcp", "ubuntu", "22.04", "amd64")
    result = audit(AuditInput([facts], Ledger(frozenset(), ("f",)), RULES, BranchPolicy(default="580"),
                              repository="r/d"))
    (f,) = result.findings
    assert f.status == Status.MISSING and f.action == "render"
    assert "gpualign ensure TAG --render DIR" in f.reason and "build it in-house" not in f.reason
    d = f.as_dict()
    assert d["action"] == "render" and "--render" in d["action_reason"] and d["arch"] == "amd64"
    assert result.missing_actions()[0][3] == "render"
    assert os_tag("debian", "13", RULES) == "debian13"


# Recorded from `apt-cache show --no-all-versions` of each suite's NVIDIA *-kernel-source packages (2026-12-02).
BOOKWORM = {"nvidia-tesla-470-kernel-source": "470.256.02-1~deb12u1", "nvidia-open-kernel-source": "535.261.03-1",
            "nvidia-tesla-535-kernel-source": "535.216.03-3~deb12u1",
            "nvidia-tesla-kernel-source": "525.147.05-15~deb12u1", "nvidia-kernel-source": "535.309.01-0+deb12u1"}
TRIXIE = {"nvidia-open-kernel-source": "550.163.01-2", "nvidia-tesla-535-kernel-source": "535.274.02-1~deb13u1",
          "nvidia-kernel-source": "550.163.01-2"}


def test_the_branches_a_release_carries_are_read_from_its_archive():
    bookworm = DEBIAN.with_sources("debian12", sources_from(BOOKWORM), "the recording").get("debian12")
    trixie = DEBIAN.with_sources("debian13", sources_from(TRIXIE), "the recording").get("debian13")
    assert bookworm is not None and trixie is not None
    assert bookworm.branches == ("535",) and bookworm.carried == ("470", "525", "535")
    assert bookworm.version("535") == "535.309.01" and bookworm.version("535", "open") == "535.261.03"
    assert trixie.branches == ("550",) and trixie.carried == ("535", "550") and trixie.version("535") is None
    # the rules' copy is the same reading
    assert DEBIAN.get("debian12").sources == bookworm.sources and DEBIAN.get("debian13").sources == trixie.sources


def test_a_newer_archive_moves_the_decision_for_check_and_ensure_alike():
    """Debian 13 starts carrying 580 as its nvidia-kernel-source: one table, so check says build and ensure builds."""
    moved = DEBIAN.with_sources("debian13", sources_from({**TRIXIE, "nvidia-kernel-source": "580.95.05-1"}),
                                "Debian's archive on 2027-01-01")
    assert who_makes("debian13", "580", "6.12.117_deb13-amd64", "amd64", False, debian=moved).maker is Maker.BUILD
    assert tagspec.buildable_here(driver_tag.parse("580-6.12.117_deb13-amd64-debian13"), debian=moved) == "trixie"
    gone = who_makes("debian13", "550", "6.12.117_deb13-amd64", "amd64", False, debian=moved)
    assert gone.maker is Maker.NONE and "carries NVIDIA 535, 550, 580" not in gone.why
    assert "only as nvidia-open-kernel-source 550.163.01" in gone.why


@given(st.dictionaries(st.sampled_from(["nvidia-kernel-source", "nvidia-open-kernel-source",
                                        "nvidia-tesla-535-kernel-source", "nvidia-tesla-kernel-source",
                                        "nvidia-kernel-dkms", "linux-headers-6.1.0-50-amd64",
                                        "nvidia-tesla-470-kernel-source"]),
                       st.sampled_from(["535.309.01-0+deb12u1", "1:550.163.01-2", "470.256.02-1~deb12u1", "", "x"])))
def test_only_nvidia_module_source_packages_with_a_version_become_sources(packages):
    sources = sources_from(packages)
    assert all(s.package.endswith("-kernel-source") and s.package.startswith("nvidia") for s in sources)
    assert all(s.version[0].isdigit() and ":" not in s.version and "-" not in s.version for s in sources)
    assert {s.package for s in sources} == {p for p, v in packages.items() if p.endswith("kernel-source") and
                                            v[:1].isdigit()}


def test_the_archive_reading_overlays_the_rules_and_a_broken_one_is_passed_over(tmp_path, monkeypatch):
    from gpualign.loaders import archive_reading

    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path))
    archive_reading.write("trixie", {**TRIXIE, "nvidia-kernel-source": "580.95.05-1"})
    archive_reading.path("bookworm").parent.mkdir(parents=True)
    archive_reading.path("bookworm").write_text("{not json")
    table = load_rules().debian
    assert table.get("debian13").branches == ("580",) and table.get("debian13").read.startswith("Debian's archive on")
    assert table.get("debian12") == DEBIAN.get("debian12")  # the broken reading: the rules' copy stands
    assert load_rules(archive_reading=False).debian == DEBIAN
