"""The lab's driver pods wait while their node's kernel is booted with the image's modules, then take its verdict;
a verdict on the same nvidia.ko, kernel and trust is kept and served without another boot; a boot that could not be
made is never a pass."""

from __future__ import annotations

import threading
from pathlib import Path

from gpualign.base.errors import GpualignError
from gpualign.judging import kernel_boot, kernel_console
from gpualign.judging.kernel_console import KernelVerdict, Load
from gpualign.lab.kernel_vm import Booting, Decided, KernelVM, trust_for

DATA = Path(__file__).resolve().parent.parent / "data" / "kernel-console"


def modules(tmp_path: Path, content: bytes = b"\x7fELF nvidia") -> Path:
    where = tmp_path / "modules"
    where.mkdir(exist_ok=True)
    (where / "nvidia.ko").write_bytes(content)
    return where


def test_the_pod_waits_for_the_booted_kernel_then_takes_its_verdict_which_is_kept(tmp_path):
    release = threading.Event()
    boots: list[tuple[str, tuple[bytes, ...]]] = []
    console = (DATA / "accepted-535-6.1.0-50-amd64.txt").read_text()

    def boot(mods: Path, kernel: str, cache: Path, *, trust: tuple[bytes, ...] = ()) -> KernelVerdict:
        release.wait(10)
        boots.append((kernel, trust))
        verdict = kernel_console.read(kernel, console)
        kernel_boot._keep(cache, kernel_boot.verdict_key(mods / "nvidia.ko", kernel, trust), verdict)
        return verdict

    vm, mods = KernelVM(tmp_path / "cache", boot), modules(tmp_path)
    first = vm.decide(mods, "6.1.0-50-amd64", None)
    assert isinstance(first, Booting) and "booted in a VM" in first.message
    assert isinstance(vm.decide(mods, "6.1.0-50-amd64", None), Booting)  # one boot, however often it is asked
    release.set()
    first.future.result(10)
    decided = vm.decide(mods, "6.1.0-50-amd64", None)
    assert decided == Decided(True, "kernel 6.1.0-50-amd64 accepted the modules: NVRM: No NVIDIA GPU found.")
    again = KernelVM(tmp_path / "cache", boot).decide(mods, "6.1.0-50-amd64", None)  # another process: kept
    assert again == decided and boots == [("6.1.0-50-amd64", ())]
    release.clear()  # the next boot waits until it is let go, so the pod is seen waiting
    other = KernelVM(tmp_path / "cache", boot).decide(modules(tmp_path, b"\x7fELF other bytes"), "6.1.0-50-amd64", None)
    assert isinstance(other, Booting)  # other bytes: the kernel is asked again
    release.set()


def test_a_boot_that_fails_or_never_finishes_is_never_a_pass_and_is_tried_again(tmp_path):
    calls: list[str] = []
    go = threading.Event()

    def failing(mods: Path, kernel: str, cache: Path, *, trust: tuple[bytes, ...] = ()) -> KernelVerdict:
        go.wait(10)
        calls.append(kernel)
        if len(calls) == 1:
            raise GpualignError("qemu-system-x86_64 is not installed")
        return KernelVerdict(kernel, Load.UNFINISHED, ("(no end after 240 s)",))

    vm, mods = KernelVM(tmp_path / "cache", failing), modules(tmp_path)
    first = vm.decide(mods, "6.1.0-50-amd64", None)
    assert isinstance(first, Booting)
    go.set()
    first.future.exception(10)
    failed = vm.decide(mods, "6.1.0-50-amd64", None)
    assert failed == Decided(False, "the kernel load check could not boot 6.1.0-50-amd64: qemu-system-x86_64 is not "
                                    "installed")
    go.clear()
    retried = vm.decide(mods, "6.1.0-50-amd64", None)
    assert isinstance(retried, Booting)
    go.set()
    retried.future.result(10)
    unfinished = vm.decide(mods, "6.1.0-50-amd64", None)
    assert isinstance(unfinished, Decided) and not unfinished.loaded and "unfinished" in unfinished.message
    go.clear()
    assert isinstance(vm.decide(mods, "6.1.0-50-amd64", None), Booting)  # asked again after no verdict
    go.set()


def test_a_secure_boot_nodes_certificates_are_trusted_on_either_architecture():
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.support.certs import self_signed_der as cert

    enrolled = [x509.load_der_x509_certificate(cert("fleet key A"))]
    assert trust_for("6.1.0-50-amd64", enrolled) == (enrolled[0].public_bytes(Encoding.DER),)
    assert trust_for("6.1.0-50-arm64", enrolled) == trust_for("6.1.0-50-amd64", enrolled)  # AAVMF, as OVMF
    assert trust_for("6.1.0-50-amd64", None) == ()  # Secure Boot off
