"""SIMULATION (lab only): decide, as the node's kernel would at `insmod`, whether a driver image's modules load.

For a node whose kernel has headers in Debian's archive (Debian 12's `6.1.0-N-amd64` and its `-cloud`/`-rt`
flavours), the image's layers are read from the registry, the `*.ko` files under /opt taken out (cached by manifest
digest), and each module checked against that kernel's Module.symvers: version magic, every imported symbol's CRC,
exactly the checks `gpualign ensure` runs before pushing (gpualign.ensure.verify), with the kernel's messages.

Everything else is tag-only, as before: an image without modules (the lab's synthetic images), or a node whose
kernel has no headers here (Ubuntu, RHEL): pulling the tag is loading it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpualign.ensure import kmod, symvers
from gpualign.ensure.archive import Archive
from gpualign.ensure.inspect import checkable, modules_of
from gpualign.ensure.verify import verify
from gpualign.lab.versions import cache_root
from gpualign.ledger.registry import RegistryClient


@dataclass(frozen=True)
class Load:
    loaded: bool
    checked: bool  # False: tag-only (no modules in the image, or no headers for the node's kernel)
    message: str  # on failure, in the kernel's words (what dmesg and insmod would say)


def load(client: RegistryClient, tag: str, kernel: str | None, driver_version: str) -> Load:
    """What `modprobe nvidia` would do with this image's modules on a node running `kernel`."""
    if not checkable(kernel):
        return Load(True, False, "tag-only: no headers for this node's kernel in the lab")
    assert kernel is not None
    found = modules_of(client, tag, cache_root() / "lab" / "driver-modules")
    if found is None:
        return Load(True, False, "tag-only: the image holds no kernel modules")
    _, directory = found
    table = symvers.parse(Archive().symvers(kernel).read_text(), f"Module.symvers of {kernel}")
    modules = [kmod.read(p.name, p.read_bytes()) for p in sorted(directory.glob("*.ko"))]
    result = verify(modules, kernel, table, driver_version or (modules[0].field("version") or ""))
    if result.ok:
        return Load(True, True, f"{len(modules)} modules loaded: {result.symbols_checked} symbol CRCs match {kernel}")
    first = result.first_symbol() or result.first_problem() or "refused"
    module = first.split(":", 1)[0]
    return Load(False, True, f"insmod: ERROR: could not insert module {module}.ko: Invalid module format; "
                             f"kernel: {first}")
