"""SIMULATION (lab only): decide, as the node's kernel would at `insmod`, whether a driver image's modules load.

For a node whose kernel has headers in Debian's archive (Debian 12's `6.1.0-N-amd64` and its `-cloud`/`-rt`
flavours, 6.12 and Debian 13's, each for amd64 and arm64), the image's layers (of the node's platform) are read from
the registry, the `*.ko` files under /opt taken out (cached by manifest digest), and each module checked against
that kernel's Module.symvers: version magic, every imported symbol's CRC, exactly the checks `gpualign ensure` runs
before pushing (gpualign.judging.verify), with the kernel's messages.

A node marked Secure Boot (the annotation SECURE_BOOT, holding the PEM certificates its kernel trusts: what a real
node has enrolled in its platform keyring or as a MOK) also has every module's signature checked, first, as the
kernel does with signatures enforced: unsigned, or signed by a key it does not hold, is "Key was rejected by
service". On a real fleet the same facts come from the node itself: `mokutil --sb-state` (or the SecureBoot EFI
variable) and `keyctl list %:.platform` / `mokutil --list-enrolled`, published as node labels by a labeller (an
NFD local feature hook, for example); gpualign reads them from an annotation here because the lab has no firmware.

Everything else is tag-only, as before: an image without modules (the lab's synthetic images), or a node whose
kernel has no headers here (Ubuntu, RHEL): pulling the tag is loading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from gpualign.archive.apt import Archive
from gpualign.base.cache import cache_root
from gpualign.judging import kmod, modsig, symvers
from gpualign.judging.inspect import checkable, contract_problem, modules_of
from gpualign.judging.verify import verify
from gpualign.ledger.registry import RegistryClient
from gpualign.model.kernels import Kernel

SECURE_BOOT = "lab.gpualign.io/secure-boot-certs"
# insmod's words for the kernel's errno, by what was refused (kmod's insmod: its mod_strerror, else strerror)
_ERRNO = (("Key was rejected by service", "Key was rejected by service"),  # EKEYREJECTED: the signature
          ("(Bad message)", "Bad message"),  # EBADMSG: a malformed signature
          ("Invalid architecture", "Invalid module format"),  # ENOEXEC: elf_validity_check
          ("version magic", "Invalid module format"),  # ENOEXEC: check_modinfo
          ("disagrees about version of symbol", "Invalid parameters"),  # EINVAL: resolve_symbol's check_version
          ("Unknown symbol", "Unknown symbol in module"))  # ENOENT: nobody exports it


def enrolled(node: Mapping[str, Any]) -> list[x509.Certificate] | None:
    """The certificates a Secure Boot node's kernel trusts (None: Secure Boot is off; signatures not enforced)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(SECURE_BOOT)
    if text is None:
        return None
    try:
        return modsig.load_certs(text.encode()) if text.strip() else []
    except ValueError:
        return []  # unreadable: the kernel would hold none of them


def insmod_words(problem: str) -> str:
    return next((words for marker, words in _ERRNO if marker in problem), "Invalid module format")


@dataclass(frozen=True)
class Load:
    loaded: bool
    checked: bool  # False: tag-only (no modules in the image, or no headers for the node's kernel)
    message: str  # on failure, in the kernel's words (what dmesg and insmod would say)
    modules: Path | None = None  # checked and loaded: the image's .ko files, for the booted kernel to judge next


def load(client: RegistryClient, tag: str, kernel: str | None, driver_version: str,
         trusted: list[x509.Certificate] | None = None) -> Load:
    """What `modprobe nvidia` would do with this image's modules on a node running `kernel` (with Secure Boot on,
    `trusted`: the certificates its kernel holds)."""
    if not checkable(kernel):
        return Load(True, False, "tag-only: no headers for this node's kernel in the lab")
    assert kernel is not None
    found = modules_of(client, tag, cache_root() / "lab" / "driver-modules", Kernel.of(kernel).arch_or_amd64)
    if found is None:
        return Load(True, False, "tag-only: the image holds no kernel modules")
    _, directory = found
    table = symvers.parse(Archive.for_kernel(kernel).symvers(kernel).read_text(), f"Module.symvers of {kernel}")
    modules = [kmod.read_file(p) for p in sorted(directory.glob("*.ko"))]
    result = verify(modules, kernel, table, driver_version or (modules[0].field("version") or ""), trusted)
    if result.ok and (problem := contract_problem(directory, modules[0].field("version") or "")) is not None:
        return Load(False, True, f"nvidia-driver init: the image cannot run as the driver container: {problem}")
    if result.ok:
        signed = f", signatures verified by the {len(trusted)} enrolled key(s)" if trusted is not None else ""
        return Load(True, True, f"{len(modules)} modules loaded: {result.symbols_checked} symbol CRCs match "
                                f"{kernel}{signed}", directory)
    module, first = result.first_refused() or ("nvidia.ko", result.first_refusal() or "refused")
    return Load(False, True, f"insmod: ERROR: could not insert module {module}: {insmod_words(first)}; "
                             f"kernel: {first}")
