"""The rendered recipes, against the facts of NVIDIA's own (github.com/NVIDIA/gpu-driver-container, read for this
test: `ubuntu22.04/precompiled/Dockerfile` and `local-repo.sh`, `rhel9/precompiled/Dockerfile` and README). Ubuntu
and RHEL are rendered only (their archives are unreachable here); the verify step they share is run for real on
real modules in tests/integration/test_rendered_verify.py."""

from __future__ import annotations

import re
import subprocess

import pytest

from gpualign.base.errors import BadInput
from gpualign.ensure import recipes
from gpualign.model import driver_tag


def render(tag: str, version: str = "580.173.02", flavour: str = "proprietary") -> recipes.Recipe:
    return recipes.render(driver_tag.parse(tag), version, flavour=flavour)


def stages(containerfile: str) -> list[str]:
    return re.findall(r"^FROM (\S+)", containerfile, re.M)


def test_ubuntu_follows_nvidias_precompiled_recipe_with_canonicals_packages():
    r = render("580-5.15.0-124-generic-ubuntu22.04")
    cf = r.files["Containerfile"]
    assert r.family == "ubuntu" and not r.runs_here
    # NVIDIA's: the CUDA base image of the release, DRIVER_BRANCH / KERNEL_VERSION in the environment
    assert stages(cf)[0] == "nvcr.io/nvidia/cuda:${CUDA_VERSION}-base-ubuntu22.04"
    assert "ENV DEBIAN_FRONTEND=noninteractive DRIVER_BRANCH=580 KERNEL_VERSION=5.15.0-124-generic" in cf
    # Canonical's prebuilt modules for exactly this branch and kernel, from jammy, -updates and -security
    for package in ("linux-objects-nvidia-580-server-5.15.0-124-generic", "linux-signatures-nvidia-5.15.0-124-generic",
                    "linux-modules-nvidia-580-server-5.15.0-124-generic", "linux-headers-5.15.0-124-generic"):
        assert f" {package}" in cf, package
    assert "for s in jammy jammy-updates jammy-security" in cf and "main restricted universe" in cf
    assert "rm -f /etc/apt/sources.list.d/cuda*" in cf  # as NVIDIA's: no GPG errors from the CUDA repository
    assert r.build_args == {"CUDA_VERSION": "12.9.1"}
    noble = render("595-6.8.0-88-generic-ubuntu24.04", "595.91.07", flavour="open").files["Containerfile"]
    assert "-base-ubuntu24.04" in noble and "for s in noble noble-updates noble-security" in noble
    assert " linux-modules-nvidia-595-server-open-6.8.0-88-generic" in noble
    assert " linux-objects-nvidia-595-server-open-6.8.0-88-generic" in noble


def test_rhel9_follows_nvidias_kmod_recipe_on_the_driver_toolkit():
    r = render("580-5.14.0-427.37.1.el9_4.x86_64-rhel9")
    cf = r.files["Containerfile"]
    assert r.family == "rhel" and not r.runs_here
    assert stages(cf)[0] == "${DRIVER_TOOLKIT_IMAGE}" and stages(cf)[-1] == \
        "nvcr.io/nvidia/cuda:${CUDA_VERSION}-base-ubi9"
    assert "git clone --depth 1 --single-branch -b rhel9 https://github.com/NVIDIA/yum-packaging-precompiled-kmod" in cf
    # the .run of the branch's pinned full version; the kernel split as the spec's defines want it
    assert "https://us.download.nvidia.com/tesla/580.173.02/NVIDIA-Linux-x86_64-580.173.02.run" in cf
    for define in ('"kernel 5.14.0"', '"kernel_release 427.37.1"', '"kernel_dist .el9_4"', '"driver 580.173.02"',
                   '"driver_branch 580"', '"epoch 1"'):
        assert f"--define {define}" in cf, define
    assert "mv run/kernel nvidia-kmod-580.173.02-x86_64/kernel" in cf
    assert "private_key.priv public_key.der" in cf  # the signing key NVIDIA's spec signs with
    assert "/usr/src/kernels/5.14.0-427.37.1.el9_4.x86_64/Module.symvers" in cf
    assert "DRIVER_TOOLKIT_IMAGE" in r.build_args
    open_ = render("580-5.14.0-427.37.1.el9_4.x86_64-rhel9", flavour="open").files["Containerfile"]
    assert "mv run/kernel-open nvidia-kmod-580.173.02-x86_64/kernel" in open_
    assert recipes.rhel_kernel("5.14.0-570.12.1.el9_6.aarch64") == {
        "ver": "5.14.0", "rel": "570.12.1", "dist": ".el9_6", "arch": "aarch64"}


def test_every_recipe_verifies_before_the_image_and_ends_in_the_same_image_shape():
    for tag, version in (("580-5.15.0-124-generic-ubuntu22.04", "580.173.02"),
                         ("580-5.14.0-427.37.1.el9_4.x86_64-rhel9", "580.173.02"),
                         ("535-6.1.0-50-amd64-debian12", "535.309.01")):
        spec = driver_tag.parse(tag)
        r = recipes.render(spec, version)
        cf = r.files["Containerfile"]
        assert stages(cf)[1] == "builder" and re.search(r"^FROM builder AS verify$", cf, re.M), tag
        assert f"verify-modules {spec.kernel} " in cf, tag
        # the image takes its modules from the verify stage only: a build that fails verification makes no image
        assert f"COPY --from=verify /out/ /lib/modules/{spec.kernel}/kernel/drivers/video/" in cf, tag
        assert f"RUN depmod {spec.kernel}" in cf and 'ENTRYPOINT ["nvidia-driver", "init"]' in cf
        assert f'LABEL version="{spec.branch}-{spec.kernel}"' in cf and f"GPUALIGN_KERNEL={spec.kernel}" in cf
        # the user space is installed, and a build whose nvidia-smi names another version than the modules' fails
        final = cf.rsplit("\nFROM ", 1)[1]
        assert "nvidia-smi" in final.split("COPY --from=verify")[0], tag
        assert f'case "$v" in *"v{version}") ;;' in final, tag
        assert set(r.files) == {"Containerfile", "verify-modules", "nvidia-driver"}
        for script in ("verify-modules", "nvidia-driver"):
            assert subprocess.run(["sh", "-n"], input=r.files[script], text=True).returncode == 0, script


def test_what_has_no_recipe_is_refused_saying_what_has():
    with pytest.raises(BadInput, match="no recipe for ubuntu20.04: NVIDIA's precompiled recipe covers Ubuntu 22.04 "
                                       "and 24.04"):
        render("580-5.4.0-150-generic-ubuntu20.04")
    with pytest.raises(BadInput, match="no recipe for rhel8: the RHEL recipe covers RHEL 9"):
        render("580-4.18.0-553.el8_10.x86_64-rhel8")
    with pytest.raises(BadInput, match="not a RHEL kernel release"):
        render("580-5.14.0-generic-rhel9")
    with pytest.raises(BadInput, match="no recipe for sles15: gpualign has recipes for debian12"):
        render("580-5.14.21-150500.55.65-default-sles15")
    with pytest.raises(BadInput, match="flavour 'closed'"):
        render("580-5.15.0-124-generic-ubuntu22.04", flavour="closed")


def test_the_build_command_names_the_ledger_tag_and_arguments():
    r = render("580-5.15.0-124-generic-ubuntu22.04")
    assert r.build_command("/ctx", "reg.local/nvidia/driver") == (
        "buildah bud --layers --build-arg CUDA_VERSION=12.9.1 -t "
        "reg.local/nvidia/driver:580-5.15.0-124-generic-ubuntu22.04 /ctx")
    arm = render("535-6.1.0-50-arm64-debian12")  # built as arm64's, natively where it runs
    assert arm.build_command("/ctx", "reg/d") == "buildah bud --layers --platform linux/arm64 -t " \
        "reg/d:535-6.1.0-50-arm64-debian12 /ctx"
    assert "linux-headers-6.1.0-50-arm64" in arm.files["Containerfile"]


def test_a_branch_newer_than_debian_carries_is_rendered_from_nvidias_own_repository():
    """Blackwell needs 570 or later; Debian carries at most 550: the recipe takes NVIDIA's own Debian repository
    (x86_64, or sbsa for arm64 servers), pins its packages at the branch's version, compiles for Debian's headers,
    verifies, and says it is rendered only."""
    from gpualign.loaders.rules import load_rules

    table = load_rules().debian
    for tag, repo, dkms, flavour in (
            ("580-6.12.118_deb13-amd64-debian13", "repos/debian13/x86_64/", "nvidia-kernel-dkms", "proprietary"),
            ("595-6.1.0-57-arm64-debian12", "repos/debian12/sbsa/", "nvidia-kernel-open-dkms", "open")):
        recipe = recipes.render(driver_tag.parse(tag), "595.91.07", flavour=flavour, debian_table=table)
        text = recipe.files["Containerfile"]
        assert not recipe.runs_here and recipe.family == "debian" and recipe.build_args == {
            "DRIVER_VERSION": "595.91.07"}
        assert f"ARG NVIDIA_REPOSITORY=https://developer.download.nvidia.com/compute/cuda/{repo}" in text
        assert f'"{dkms}=${{DRIVER_VERSION}}-*"' in text and "cuda-keyring_1.1-1_all.deb" in text
        kernel = driver_tag.parse(tag).kernel
        assert f"linux-headers-{kernel}" in text and f"verify-modules {kernel} " in text
        assert '"libcuda1=${DRIVER_VERSION}-*"' in text and "rendered, not built or verified here" in \
            recipe.notes[0]
    # a branch Debian carries is the recipe ensure runs here, from Debian's own source
    here = recipes.render(driver_tag.parse("550-6.12.118_deb13-amd64-debian13"), "550.163.01", debian_table=table)
    assert here.runs_here and "developer.download.nvidia.com" not in here.files["Containerfile"]
