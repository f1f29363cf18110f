"""`gpualign verify IMAGE_REF`: does the kernel accept the image's modules? Its own Debian kernel, booted in a VM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli.common import progress, report, stdout
from gpualign.cli.options import DockerConfigOpt, InsecureRegistryOpt, Output, OutputOpt
from gpualign.cli.printers import Printers, Shown

if TYPE_CHECKING:
    from gpualign.judging.kernel_console import KernelVerdict


def verify(
    image: Annotated[str, typer.Argument(metavar="IMAGE_REF", help="the driver image, HOST/REPO:TAG")],
    kernel: Annotated[str | None, typer.Option(
        "--kernel", metavar="RELEASE",
        help="boot this kernel release instead of the one the tag names (either spelling: 6.12.118+deb13-amd64 or "
             "NFD's 6.12.118_deb13-amd64), to ask whether the image would load there")] = None,
    secure_boot_cert: Annotated[list[Path] | None, typer.Option(
        "--secure-boot-cert", metavar="CERT",
        help="boot under UEFI Secure Boot with this certificate (PEM or DER) enrolled as a node's MOK, so the kernel "
             "locks down and refuses modules it did not sign (repeatable; amd64 kernels)")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", min=10, help="give up on a VM that has not finished by then")] = 240.0,
    output: OutputOpt = Output.table,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
) -> None:
    """Load a driver image's kernel modules into their own Debian kernel, booted in a VM (qemu: KVM where it
    answers, TCG emulation otherwise), and say what the kernel said.

    The kernel's own package (linux-image-RELEASE, from Debian's archive as the build reads it; cached) is booted
    with busybox; its modules that nvidia.ko needs are loaded first, then nvidia.ko. On a machine without a GPU the
    kernel takes nvidia.ko as far as it can: every symbol resolved, version magic and modversions checked, its init
    run, which stops at "NVRM: No NVIDIA GPU found.": that is the pass. Anything else fails, quoting the kernel
    (unknown symbol, disagrees about version of symbol, invalid module format, key rejected, an oops). NVIDIA's
    other modules import nvidia.ko's symbols, so they cannot load without a GPU: the report names them.

    Exit 0 when the kernel accepts the modules, 1 when it refuses them (or never finished), 2 on bad input (an
    image that is not there, a kernel Debian does not carry). Debian 12 and 13 kernels, amd64 (and arm64 under
    qemu-system-aarch64).

    With --secure-boot-cert the VM boots as a Secure Boot node does (OVMF, Debian's signed kernel, the certificate
    in its MOK list): a module signed by another key, or by none, is refused with the kernel's "Key was rejected by
    service"."""
    from gpualign.usecases.kernel_load import load_image

    trust = tuple(read_cert(p) for p in secure_boot_cert or ())  # a bad file is bad input before anything starts
    progress(f"booting the kernel of {image} with its modules (a VM: about 10-60 s) ...")
    verdict = load_image(image, kernel, docker_config, timeout, trust=trust)
    VERIFY.print(output, report("KernelLoad", {"image": image}, verdict.as_dict()), verdict)
    if not verdict.ok:
        raise typer.Exit(EXIT_FINDINGS)


def read_cert(path: Path) -> bytes:
    from gpualign.judging.modsig import load_certs

    if not path.is_file():
        raise BadInput(f"--secure-boot-cert {path}: no such file")
    try:
        if load_certs(path.read_bytes()):
            return path.read_bytes()
    except ValueError:
        pass
    raise BadInput(f"--secure-boot-cert {path}: not an X.509 certificate (PEM or DER)")


def register(app: typer.Typer) -> None:
    app.command("verify", short_help="Load an image's modules into their own kernel, booted in a VM.")(verify)


def _verdict_text(_document: dict[str, Any], _shown: Shown, verdict: KernelVerdict) -> None:
    """The kernel's verdict in a line, the modules not loaded, and on a refusal what the kernel said of each."""
    stdout.print(verdict.line())
    if verdict.not_loaded:
        stdout.print(f"not loaded: {', '.join(verdict.not_loaded)} (they import nvidia.ko's symbols, and "
                     "nvidia.ko stops where a machine without a GPU must)")
    if not verdict.ok:
        for a in verdict.attempts:
            for line in a.lines:
                stdout.print(f"  {a.module}: {line}")


VERIFY = Printers(command="verify", table=_verdict_text)
