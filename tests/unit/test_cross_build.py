"""arm64 images from an amd64 builder, in their pure parts: the archive read for two architectures (the target's
packages named NAME:ARCH), the cross compiler chosen from what the arm64 headers name, the image's own programs run
under qemu-user, and a module's CPU read from its ELF header and refused by the kernel's first check."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpualign.archive import apt as archive_mod
from gpualign.archive.apt import Archive
from gpualign.base.errors import BadInput
from gpualign.ensure import buildroot, foreign
from gpualign.judging import kmod
from gpualign.judging.verify import verify
from tests.support.kmods import fake_ko

ARM64 = "6.1.0-50-arm64"
HEADERS = """Package: linux-headers-6.1.0-50-arm64
Version: 6.1.176-1
Architecture: arm64
Depends: linux-headers-6.1.0-50-common (= 6.1.176-1), linux-kbuild-6.1 (>= 6.1.176-1), gcc-12
"""


@pytest.fixture
def amd64_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_mod, "host_arch", lambda: "amd64")
    monkeypatch.setattr(foreign, "host_arch", lambda: "amd64")


@pytest.fixture
def apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, amd64_host: None) -> list[list[str]]:
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    seen: list[list[str]] = []

    def run(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, HEADERS, "")

    monkeypatch.setattr(archive_mod.subprocess, "run", run)
    monkeypatch.setattr(Archive, "update", lambda self, force=False: None)
    return seen


def test_an_arm64_kernel_is_read_from_its_releases_archive_for_both_architectures(amd64_host):
    bookworm = Archive.for_kernel(ARM64)
    assert (bookworm.suite, bookworm.arch, bookworm.cross, bookworm.key) == ("bookworm", "arm64", True,
                                                                              "bookworm-arm64")
    trixie = Archive.for_kernel("6.12.118+deb13-arm64")
    assert (trixie.suite, trixie.arch, trixie.key) == ("trixie", "arm64", "trixie-arm64")
    native = Archive.for_kernel("6.1.0-50-amd64")
    assert not native.cross and native.key == "bookworm" and native.target("nvidia-kernel-source") == \
        "nvidia-kernel-source"
    assert bookworm.target("nvidia-kernel-source") == "nvidia-kernel-source:arm64"
    assert all("[arch=amd64,arm64 signed-by=" in line for line in bookworm.source_lines())
    assert not any("arch=" in line for line in bookworm.source_lines(native=True))  # the root's own tools
    assert Archive().for_tag_kernel("debian12", ARM64) == bookworm
    assert "arm64" in bookworm.describe()


def test_the_targets_packages_are_asked_for_by_architecture_and_answered_by_name(apt):
    found = Archive(arch="arm64").target_versions(["linux-headers-6.1.0-50-arm64"])
    assert found == {"linux-headers-6.1.0-50-arm64": "6.1.176-1"}
    (show,) = [c for c in apt if c[0] == "apt-cache"]
    assert show[-1] == "linux-headers-6.1.0-50-arm64:arm64"
    assert "APT::Architectures::=arm64" in show and "APT::Architectures::=amd64" in show
    assert Archive(arch="arm64").target_depends("linux-headers-6.1.0-50-arm64") == [
        "linux-headers-6.1.0-50-common", "linux-kbuild-6.1", "gcc-12"]


class Depends:
    def __init__(self, depends: dict[str, list[str]]) -> None:
        self.depends = depends
        self.cross, self.arch = True, "arm64"

    def target_depends(self, package: str) -> list[str]:
        return self.depends[package]


def test_the_cross_compiler_is_the_gcc_version_the_arm64_headers_name_and_an_installs_dependencies_are_left():
    archive = Depends({
        "linux-headers-6.1.0-50-arm64": ["linux-headers-6.1.0-50-common", "linux-kbuild-6.1", "gcc-12"],
        "linux-headers-6.12.118+deb13-arm64": ["linux-base", "linux-headers-6.12.118+deb13-common",
                                               "linux-image-6.12.118+deb13-arm64", "linux-kbuild-6.12.118+deb13",
                                               "linux-compiler-gcc-14-arm"]})
    tools = buildroot._host_tools(archive, list(archive.depends))  # type: ignore[arg-type]
    assert tools == ["linux-headers-6.1.0-50-common", "linux-kbuild-6.1", "gcc-12-aarch64-linux-gnu",
                     "linux-headers-6.12.118+deb13-common", "linux-kbuild-6.12.118+deb13", "gcc-14-aarch64-linux-gnu"]
    assert buildroot.cross_prefix(archive) == "aarch64-linux-gnu-"  # type: ignore[arg-type]
    archive.cross, archive.arch = False, "amd64"  # natively: the compiler the headers name, as it is
    assert buildroot._host_tools(archive, ["linux-headers-6.12.118+deb13-arm64"]) == [  # type: ignore[arg-type]
        "linux-headers-6.12.118+deb13-common", "linux-kbuild-6.12.118+deb13", "linux-compiler-gcc-14-arm"]
    archive.cross = True
    archive.arch = "riscv64"
    with pytest.raises(BadInput, match="gpualign cross-compiles for amd64, arm64"):
        buildroot.cross_prefix(archive)  # type: ignore[arg-type]


def test_an_images_own_programs_run_under_chroot_natively_and_under_qemu_user_across(amd64_host, monkeypatch,
                                                                                      tmp_path):
    root = tmp_path / "root"
    assert foreign.command(root, ["/usr/bin/nvidia-smi", "-h"], "amd64") == [
        "chroot", str(root), "/usr/bin/nvidia-smi", "-h"]
    monkeypatch.setattr(foreign.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert foreign.command(root, ["/usr/bin/nvidia-smi", "-h"], "arm64") == [
        "qemu-aarch64-static", "-L", str(root), str(root / "usr/bin/nvidia-smi"), "-h"]
    monkeypatch.setattr(foreign.shutil, "which", lambda name: None)
    with pytest.raises(BadInput, match="qemu-aarch64-static is not installed: an arm64 image's own programs"):
        foreign.command(root, ["/usr/bin/nvidia-smi", "-h"], "arm64")


def arm64_module(machine: int, imports: dict[str, int]) -> kmod.Module:
    data = fake_ko({"version": "535.309.01", "vermagic": f"{ARM64} SMP mod_unload modversions aarch64",
                    "name": "nvidia"}, imports, machine=machine)
    return kmod.read("nvidia.ko", data)


def test_a_modules_cpu_is_read_from_its_elf_header_and_the_kernel_refuses_another_first():
    table = {"filp_open": 0x1111}
    aarch64 = arm64_module(183, {"filp_open": 0x1111})
    assert aarch64.arch == "arm64"
    assert verify([aarch64], ARM64, table, "535.309.01").ok
    x86 = arm64_module(62, {"filp_open": 0x2222})  # another CPU's build, whose CRC differs as well
    assert x86.arch == "amd64"
    refused = verify([x86], ARM64, table, "535.309.01")
    assert not refused.ok
    assert refused.first_refusal() == f"nvidia: Invalid architecture in ELF header (amd64 module, {ARM64} is arm64)"


def test_a_version_is_asked_of_apt_once_until_the_lists_are_read_again(apt):
    arm64 = Archive(arch="arm64")
    for _ in range(3):
        assert arm64.target_version("linux-headers-6.1.0-50-arm64") == "6.1.176-1"
    assert len([c for c in apt if c[0] == "apt-cache"]) == 1
    stamp = arm64.state / "updated"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()  # the lists read again: what apt said before may have changed
    assert arm64.target_version("linux-headers-6.1.0-50-arm64") == "6.1.176-1"
    assert len([c for c in apt if c[0] == "apt-cache"]) == 2
