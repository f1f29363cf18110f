"""What a real Debian kernel said when a driver image's modules were loaded into it, read into a verdict: consoles
recorded from qemu booting Debian's own linux-image-6.1.0-50-amd64 and -47 (gpualign.judging.kernel_boot) with the
nvidia.ko gpualign built for 6.1.0-50. The pass is NVIDIA's own "No NVIDIA GPU found"; a refusal quotes the
kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualign.judging import kernel_console
from gpualign.judging.kernel_boot import KernelTree, _write_initramfs, load_order
from gpualign.judging.kernel_console import Load

DATA = Path(__file__).resolve().parent.parent / "data" / "kernel-console"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_trixies_kernel_takes_its_550_modules_as_far_as_no_gpu():
    verdict = kernel_console.read("6.12.118+deb13-amd64", recorded("accepted-550-6.12.118+deb13-amd64.txt"))
    assert verdict.ok and verdict.said == ("NVRM: No NVIDIA GPU found.",)
    assert [a.module for a in verdict.attempts] == ["drm", "nvidia"]


def test_debians_arm64_kernel_takes_modules_cross_compiled_on_amd64_as_far_as_no_gpu():
    """Recorded: 535.309.01 compiled on an amd64 builder for 6.1.0-50-arm64, booted in qemu-system-aarch64 (virt,
    cpu max, TCG). NVIDIA's driver warns it has not been qualified on the emulated CPU, then finds no GPU."""
    verdict = kernel_console.read("6.1.0-50-arm64", recorded("accepted-535-6.1.0-50-arm64.txt"))
    assert verdict.ok and verdict.said == ("NVRM: No NVIDIA GPU found.",)
    assert [(a.module, a.rc) for a in verdict.attempts] == [("drm", 0), ("nvidia", 19)]


def test_the_kernel_that_took_nvidia_ko_as_far_as_no_gpu_accepts():
    verdict = kernel_console.read("6.1.0-50-amd64", recorded("accepted-535-6.1.0-50-amd64.txt"), ("nvidia-uvm",))
    assert verdict.ok and verdict.load is Load.ACCEPTED
    assert verdict.said == ("NVRM: No NVIDIA GPU found.",)
    assert [(a.module, a.rc) for a in verdict.attempts] == [("drm", 0), ("nvidia", 19)]  # ENODEV: no GPU here
    assert verdict.not_loaded == ("nvidia-uvm",)


def test_another_abis_kernel_refuses_with_its_own_words():
    verdict = kernel_console.read("6.1.0-47-amd64", recorded("refused-535-6.1.0-50-modules-in-6.1.0-47-amd64.txt"))
    assert verdict.load is Load.REFUSED
    assert verdict.said == ("nvidia: disagrees about version of symbol module_layout",)


def test_nvidia_ko_without_the_kernels_drm_first_is_refused_naming_the_symbol():
    verdict = kernel_console.read("6.1.0-50-amd64", recorded("refused-nvidia-without-drm-6.1.0-50-amd64.txt"))
    assert verdict.load is Load.REFUSED
    assert verdict.said[0] == "nvidia: Unknown symbol drm_gem_object_free (err -2)", verdict.said


@pytest.mark.parametrize("console", ["", "SeaBIOS\nBooting from ROM...\n",
                                     "GPUALIGN insmod drm\nGPUALIGN rc drm 0\nGPUALIGN insmod nvidia\n"])
def test_a_kernel_that_never_finished_is_unfinished_never_accepted(console):
    verdict = kernel_console.read("6.1.0-50-amd64", console)
    assert not verdict.ok and verdict.load is Load.UNFINISHED


def test_an_oops_during_init_refuses_even_after_no_gpu():
    console = ("GPUALIGN insmod nvidia\nNVRM: No NVIDIA GPU found.\nBUG: kernel NULL pointer dereference\n"
               "GPUALIGN rc nvidia 19\nGPUALIGN done\n")
    verdict = kernel_console.read("6.1.0-50-amd64", console)
    assert verdict.load is Load.REFUSED and verdict.said == ("BUG: kernel NULL pointer dereference",)


def test_dependencies_load_first_in_modules_dep_order_and_builtins_need_nothing(tmp_path):
    modules = tmp_path / "lib" / "modules" / "6.1.0-50-amd64"
    modules.mkdir(parents=True)
    (modules / "modules.dep").write_text(
        "kernel/drivers/gpu/drm/drm_kms_helper.ko: kernel/drivers/gpu/drm/drm.ko kernel/drivers/i2c/i2c-algo-bit.ko\n"
        "kernel/drivers/gpu/drm/drm.ko:\nkernel/drivers/i2c/i2c-algo-bit.ko:\n")
    (modules / "modules.builtin").write_text("kernel/drivers/acpi/video.ko\n")
    tree = KernelTree("6.1.0-50-amd64", tmp_path)
    assert load_order(tree, ["drm_kms_helper", "video", "drm"]) == [
        "kernel/drivers/gpu/drm/drm.ko", "kernel/drivers/i2c/i2c-algo-bit.ko",
        "kernel/drivers/gpu/drm/drm_kms_helper.ko"]


def test_the_initramfs_is_a_newc_archive_busybox_reads(tmp_path):
    import shutil
    import subprocess

    if shutil.which("busybox") is None:
        pytest.fail("busybox is not installed (Debian's busybox-static; scripts/install-debs installs it)")
    out = tmp_path / "initramfs.cpio"
    _write_initramfs(out, {"m/nvidia.ko": b"\x7fELF" + b"x" * 5}, b"#!/bin/busybox sh\necho hi\n")
    listed = subprocess.run(["busybox", "cpio", "-t"], stdin=out.open("rb"), capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["bin", "m", "init", "bin/busybox", "m/nvidia.ko"]


def test_markers_are_found_where_a_kernel_message_shares_their_serial_line():
    """init's echo and the kernel's printk share the serial console: one may land in the middle of the other."""
    console = ("[    4.9] random: crng init done\rGPUALIGN insmod drm\n"
               "GPUALIGN rc drm 0[    5.2] nvidia: loading out-of-tree module taints kernel.\n"
               "GPUALIGN insmod nvidia\n[    6.0] NVRM: No NVIDIA GPU found.GPUALIGN rc nvidia 19\nGPUALIGN done\n")
    verdict = kernel_console.read("6.1.0-50-amd64", console)
    assert verdict.ok and [(a.module, a.rc) for a in verdict.attempts] == [("drm", 0), ("nvidia", 19)]


# Recorded under UEFI Secure Boot (OVMF with Debian's signed 6.1.0-50-amd64 in its db, and one certificate in the
# MOK list the kernel reads, as shim leaves it): the kernel locked itself down, and only what that key signed loaded.
def test_under_secure_boot_a_module_signed_by_the_trusted_key_is_accepted_and_the_lockdown_is_read():
    verdict = kernel_console.read("6.1.0-50-amd64", recorded("secure-boot-accepted-signed-535-6.1.0-50-amd64.txt"))
    assert verdict.ok and verdict.said == ("NVRM: No NVIDIA GPU found.",)
    assert verdict.lockdown == "integrity" and verdict.lockdown in kernel_console.LOCKED
    assert [a.module for a in verdict.attempts] == ["drm", "nvidia"]  # the lockdown marker is not an attempt


@pytest.mark.parametrize(("name", "reason"), [
    ("secure-boot-refused-unsigned-535-6.1.0-50-amd64.txt", "Loading of unsigned module is rejected"),
    ("secure-boot-refused-foreign-key-535-6.1.0-50-amd64.txt", "Loading of module with unavailable key is rejected")])
def test_under_secure_boot_an_unsigned_or_foreign_signed_module_is_refused_in_the_kernels_words(name, reason):
    verdict = kernel_console.read("6.1.0-50-amd64", recorded(name))
    assert verdict.load is Load.REFUSED and verdict.lockdown == "integrity"
    assert verdict.said == (reason, "insmod: can't insert '/m/nvidia.ko': Key was rejected by service"), verdict.said
    assert [(a.module, a.rc) for a in verdict.attempts] == [("drm", 0), ("nvidia", 129)]  # the kernel's own drm: signed


def test_a_boot_without_secure_boot_says_no_lockdown():
    """What the kernel load check refuses to count as a signature check (kernel_boot raises NotEnforced)."""
    verdict = kernel_console.read("6.1.0-50-amd64", recorded("accepted-535-6.1.0-50-amd64.txt"))
    assert verdict.ok and verdict.lockdown == "" and verdict.lockdown not in kernel_console.LOCKED
    assert kernel_console.read("6.1.0-50-amd64", "GPUALIGN lockdown []\n").lockdown == ""


def test_nvidias_open_modules_get_as_far_as_no_gpu_too():
    """Recorded: the open modules of 535.261.03 (Debian's nvidia-open-kernel-source) compiled for 6.1.0-50, loaded
    into that kernel: the same NVRM words as the proprietary modules' at the end of init."""
    verdict = kernel_console.read("6.1.0-50-amd64", recorded("accepted-535-open-6.1.0-50-amd64.txt"))
    assert verdict.ok and verdict.said == ("NVRM: No NVIDIA GPU found.",)
    assert [(a.module, a.rc) for a in verdict.attempts] == [("drm", 0), ("nvidia", 19)]


@pytest.mark.parametrize(("name", "ok", "said"), [
    ("secure-boot-accepted-signed-535-6.1.0-50-arm64.txt", True, ("NVRM: No NVIDIA GPU found.",)),
    ("secure-boot-refused-unsigned-535-6.1.0-50-arm64.txt", False,
     ("Loading of unsigned module is rejected", "insmod: can't insert '/m/nvidia.ko': Key was rejected by service"))])
def test_debians_arm64_kernel_under_secure_boot_in_aavmf_enforces_signatures_too(name, ok, said):
    """Recorded: qemu-system-aarch64 with Debian's AAVMF, the arm64 kernel's own signer in db and one certificate
    in the MOK list: the kernel locked down, loaded what that key signed, refused the unsigned module."""
    verdict = kernel_console.read("6.1.0-50-arm64", recorded(name))
    assert verdict.ok is ok and verdict.said == said and verdict.lockdown == "integrity"
