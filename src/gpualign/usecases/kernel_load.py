"""`gpualign verify IMAGE_REF`: a driver image's modules loaded into their own Debian kernel, booted in a VM
(gpualign.judging.kernel_boot), by default the kernel its tag names, or another release to ask "would this image
load there". Refusals say what is wrong with the input; the command line words them."""

from __future__ import annotations

from pathlib import Path

from gpualign.base.errors import BadInput
from gpualign.judging.kernel_console import KernelVerdict, Load
from gpualign.ledger.registry import connect
from gpualign.model.image_ref import ImageRef


class NotAnImage(BadInput):
    """The reference names no image gpualign can read (`why` in one line)."""

    def __init__(self, ref: str, why: str) -> None:
        super().__init__(f"{ref}: {why}")


class NoKernelNamed(NotAnImage):
    """The image's tag names no kernel, and no other was given (the command line names its flag)."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref, "its tag names no kernel (BRANCH-KERNEL-OS), and no kernel was named to boot")
        self.ref = ref


def load_image(ref: str, kernel: str | None = None, docker_config: Path | None = None,
               timeout: float = 240.0, trust: tuple[bytes, ...] = ()) -> KernelVerdict:
    """HOST/REPO:TAG (registry:// optional) -> the kernel's verdict on its modules (under Secure Boot trusting
    `trust`'s certificates, when given)."""
    from gpualign.judging.inspect import modules_of
    from gpualign.judging.kernel_boot import boot_and_load, kernels_cache
    from gpualign.model import driver_tag
    from gpualign.model.kernels import Kernel

    text = ref.removeprefix("registry://").removeprefix("oci://")
    parsed = ImageRef.parse(text)
    name, tag = parsed.name, parsed.tag
    if not tag or parsed.digest or "/" not in name:
        raise NotAnImage(repr(ref), "expected HOST/REPO:TAG")
    spec = driver_tag.try_parse(tag)
    if kernel is None and spec is None:
        raise NoKernelNamed(ref)
    named = Kernel.of(kernel) if kernel else spec.kernel_value if spec else Kernel.of("")
    release, arch = named.release, named.arch_or_amd64
    with connect(f"registry://{name}", docker_config=docker_config) as client:
        if client.digest(tag) is None:
            raise NotAnImage(ref, "not in the registry")
        found = modules_of(client, tag, kernels_cache().parent / "images", arch)
    if found is None:
        return KernelVerdict(release, Load.REFUSED, (f"the image holds no kernel modules for {arch} to load",))
    return boot_and_load(found[1], release, kernels_cache(), timeout=timeout, trust=trust)
