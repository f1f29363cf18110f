"""Secure Boot for the kernel load check: the firmware a real node boots, holding the keys that node would hold.

A Debian kernel learns a module-signing key of yours at boot from shim: shim copies its MOK list into the runtime
variable `MokListRT`, and with `MokListTrustedRT` set the kernel puts those certificates on its machine keyring,
which it trusts for modules (security/integrity/platform_certs/load_uefi.c, Debian 12's 6.1 and Debian 13's 6.12).
With UEFI Secure Boot on, the kernel locks itself down (integrity) and refuses any module not signed by a key it
holds: "Key was rejected by service".

Here OVMF (Debian's `ovmf`: its Secure Boot build, which needs SMM, on qemu's q35) boots an amd64 kernel directly,
and its variable store is written before the boot (virt-firmware reads and writes edk2's store) with:
- PK and KEK: a platform key made for these VMs. Nothing is signed with it; it puts the firmware in user mode, where
  Secure Boot is enforced.
- db: the certificate that signed the kernel's own image, read from its Authenticode signature, so the firmware
  verifies and boots Debian's kernel as Debian signed it (a kernel without a signature is refused here).
- MokListRT with the certificates to trust for modules, and MokListTrustedRT = 1, as shim leaves them.

An arm64 kernel boots the same way in Debian's AAVMF (`qemu-efi-aarch64`), on qemu's `virt` machine.
"""

from __future__ import annotations

import datetime
import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpualign.base.errors import BadInput, Failed

OVMF = Path("/usr/share/OVMF")
CODE, VARS = OVMF / "OVMF_CODE_4M.secboot.fd", OVMF / "OVMF_VARS_4M.fd"  # Debian's ovmf: SB code, empty store


@dataclass(frozen=True)
class Edk2:
    """One architecture's UEFI firmware, as Debian packages it, and how qemu boots it."""

    package: str
    code: Path  # the firmware, with Secure Boot
    template: Path  # its empty variable store
    machine: tuple[str, ...]  # the machine the firmware runs on (OVMF's Secure Boot needs SMM; ARM has none)


FIRMWARE = {
    "amd64": Edk2("ovmf", CODE, VARS, ("-machine", "q35,smm=on",
                                       "-global", "driver=cfi.pflash01,property=secure,value=on")),
    # AAVMF's empty store is blank flash the firmware formats at its first boot: its formatted Secure Boot store
    # (Microsoft's keys) is the template, whose PK, KEK and db are replaced
    "arm64": Edk2("qemu-efi-aarch64", Path("/usr/share/AAVMF/AAVMF_CODE.fd"),
                  Path("/usr/share/AAVMF/AAVMF_VARS.ms.fd"), ("-machine", "virt", "-cpu", "max")),
}
SHIM_LOCK = "605dab50-e046-4300-abb6-3dd810dd8b23"  # shim's vendor GUID: MokListRT and MokListTrustedRT live under it
OWNER = "a8c5c1f0-5b4e-4d6c-9e8f-6770616c6967"  # the owner GUID gpualign writes its signature-list entries under
_NV_BS_RT = 0x7  # non-volatile, boot service and runtime access: the kernel reads the variable after boot


class NoSecureBoot(BadInput):
    """The kernel load check cannot boot this kernel under Secure Boot (the sentence says why)."""


class NotEnforced(Failed):
    """The kernel was booted under Secure Boot and did not lock down: its load is no verdict on signatures (exit 1,
    never a pass)."""


@dataclass(frozen=True)
class Firmware:
    """The firmware's Secure Boot build and a variable store holding the keys (copied per boot: the VM writes to
    it)."""

    edk2: Edk2
    store: Path
    trusted: tuple[str, ...]  # the subjects of the certificates the kernel trusts for modules

    def qemu_args(self, scratch: Path) -> list[str]:
        shutil.copyfile(self.store, scratch)
        return [*self.edk2.machine, "-drive", f"if=pflash,format=raw,unit=0,file={self.edk2.code},readonly=on",
                "-drive", f"if=pflash,format=raw,unit=1,file={scratch}"]


def kernel_signers(vmlinuz: bytes) -> list[bytes]:
    """The certificates (DER) in the kernel image's Authenticode signatures: the firmware's db needs its signer."""
    import pefile
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs7

    try:
        pe = pefile.PE(data=vmlinuz, fast_load=True)
    except pefile.PEFormatError:
        return []
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[4]  # IMAGE_DIRECTORY_ENTRY_SECURITY: a file offset, not an RVA
    table, found, pos = vmlinuz[directory.VirtualAddress:directory.VirtualAddress + directory.Size], [], 0
    while pos + 8 <= len(table):
        length = int.from_bytes(table[pos:pos + 4], "little")
        kind = int.from_bytes(table[pos + 6:pos + 8], "little")
        if length < 8:
            break
        if kind == 2:  # WIN_CERT_TYPE_PKCS_SIGNED_DATA
            found += [c.public_bytes(Encoding.DER) for c in pkcs7.load_der_pkcs7_certificates(
                table[pos + 8:pos + length])]
        pos += (length + 7) & ~7
    return found


def firmware_for(release: str, arch: str, vmlinuz: Path, certs: Sequence[bytes], cache: Path) -> Firmware:
    """The firmware that boots `vmlinuz` (an `arch` kernel) under Secure Boot trusting `certs` (DER or PEM) for
    modules; the variable store is made once per architecture, kernel signer and certificate set and cached under
    cache/secure-boot/."""
    edk2 = FIRMWARE.get(arch)
    if edk2 is None:
        raise NoSecureBoot(f"kernel {release}: gpualign boots amd64 and arm64 kernels under Secure Boot, not {arch}")
    if not edk2.code.exists() or not edk2.template.exists():
        raise NoSecureBoot(f"{edk2.code} is not installed (Debian's {edk2.package}): the kernel load check boots "
                           "Secure Boot in it")
    if not certs:
        raise NoSecureBoot("Secure Boot was asked with no certificate to trust: every module would be refused")
    held = [der(c) for c in certs]
    signers = kernel_signers(vmlinuz.read_bytes())
    if not signers:
        raise NoSecureBoot(f"kernel {release}: its image carries no Secure Boot signature to boot it with")
    key = hashlib.sha256(b"".join(sorted(signers)) + b"|" + b"".join(sorted(held))).hexdigest()[:24]
    store = cache / "secure-boot" / f"vars-{arch}-{key}.fd"
    trusted = tuple(_subject(c) for c in held)
    if not store.exists():
        store.parent.mkdir(parents=True, exist_ok=True)
        write_store(store, signers, held, _platform_cert(cache / "secure-boot"), edk2.template)
    return Firmware(edk2, store, trusted)


def write_store(out: Path, signers: list[bytes], trusted: list[bytes], platform: Path, template: Path = VARS) -> None:
    from virt.firmware.efi import efivar
    from virt.firmware.varstore.edk2 import Edk2VarStore

    edk2 = Edk2VarStore(str(template))
    variables = edk2.get_varlist()
    variables.enroll_platform_with_cert(str(platform), guid=OWNER, ms_kek="none")
    db = variables.add_cert_prepare("db", replace=True)  # only the kernel's signer: no vendor's key is trusted
    for cert in signers:
        db.sigdb_add_cert_data(OWNER, cert)
    mok = efivar.EfiVar("MokListRT", guid=SHIM_LOCK, attr=_NV_BS_RT)  # a signature list, as its name says
    for cert in trusted:
        mok.sigdb_add_cert_data(SHIM_LOCK, cert)
    variables["MokListRT"] = mok
    variables["MokListTrustedRT"] = efivar.EfiVar("MokListTrustedRT", guid=SHIM_LOCK, attr=_NV_BS_RT,
                                                  data=b"\x01")
    variables.enable_secureboot()
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".vars-", delete=False) as tmp:
        edk2.write_varstore(tmp.name, variables)
    Path(tmp.name).replace(out)


def _platform_cert(where: Path) -> Path:
    """A self-signed certificate for PK and KEK, made once; its key is never kept (nothing is signed with it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    found = where / "platform-key.pem"
    if found.exists():
        return found
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpualign kernel load check platform key")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
    with tempfile.NamedTemporaryFile(dir=where, prefix=".platform-", delete=False) as tmp:
        tmp.write(cert.public_bytes(serialization.Encoding.PEM))
    Path(tmp.name).replace(found)
    return found


def der(cert: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        loaded = x509.load_pem_x509_certificate(cert) if b"-----BEGIN" in cert else x509.load_der_x509_certificate(cert)
    except ValueError as err:
        raise BadInput(f"a certificate to trust is neither PEM nor DER X.509: {err}") from None
    return loaded.public_bytes(Encoding.DER)


def _subject(der: bytes) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(der)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else cert.subject.rfc4514_string()
