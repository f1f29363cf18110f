"""A kernel module's own records, read from its ELF sections as the kernel reads them at load. Pure (bytes in).

- `.modinfo`: NUL-separated key=value strings (vermagic, version, name, depends, signer fields for modinfo);
- `__versions`: the symbols it imports, each with the CRC it was built against (struct modversion_info: an
  unsigned long CRC, then a 56-byte NUL-padded name; 64 bytes an entry on 64-bit kernels);
- `__ksymtab_strings`: the names of the symbols it exports (for the NVIDIA modules that import from each other);
- the appended signature: "~Module signature appended~\\n" at the very end, after a struct module_signature.

pyelftools reads the ELF; the layouts above are the kernel's (include/linux/module.h, scripts/mod/modpost.c,
include/linux/module_signature.h).
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from gpualign.base.errors import BadInput
from gpualign.judging import modsig

if TYPE_CHECKING:  # the signature modules (cryptography, asn1crypto) are loaded only for a signed module
    from cryptography import x509

    from gpualign.judging import modsig

SIG_MAGIC = b"~Module signature appended~\n"
ELF_ARCH = {"EM_X86_64": "amd64", "EM_AARCH64": "arm64"}  # e_machine, as Kubernetes names the architecture
_SIG_STRUCT = struct.Struct(">BBBBBxxxI")  # algo, hash, id_type, signer_len, key_id_len, pad[3], sig_len


@dataclass(frozen=True)
class Signature:
    id_type: int  # 2: PKCS#7
    signer_len: int
    key_id_len: int
    length: int
    pkcs7: bytes = field(repr=False)
    signed_by: modsig.SignedBy | None = field(default=None, repr=False)  # None: malformed (see `malformed`)
    content_digest: bytes | None = field(default=None, repr=False)  # of the bytes before it, by its algorithm
    malformed: str | None = None

    def check(self, trusted: Sequence[x509.Certificate]) -> modsig.SigCheck:
        return modsig.check(self.signed_by, self.content_digest, trusted, self.malformed)


@dataclass(frozen=True)
class Module:
    name: str  # file name, e.g. nvidia-uvm.ko
    info: dict[str, list[str]]
    imports: dict[str, int]  # symbol -> CRC it was built against
    exports: frozenset[str]
    signature: Signature | None
    size: int
    arch: str | None = None  # the CPU it was built for, from the ELF header (amd64, arm64), as Kubernetes spells it

    def field(self, key: str) -> str | None:
        values = self.info.get(key)
        return values[0] if values else None

    @property
    def vermagic(self) -> str:
        return self.field("vermagic") or ""

    @property
    def release(self) -> str:
        """The kernel release the module was built for: the first field of vermagic."""
        return self.vermagic.split(" ", 1)[0]

    @property
    def flavour(self) -> str | None:
        """For nvidia.ko, the flavour of NVIDIA's driver, by its license: proprietary ("NVIDIA") or open ("Dual
        MIT/GPL", open-gpu-kernel-modules). None for any other module: the proprietary build's nvidia-uvm is "Dual
        MIT/GPL" too, and nvidia-drm "MIT", whichever the flavour."""
        return {"NVIDIA": "proprietary", "Dual MIT/GPL": "open"}.get(self.field("license") or "") \
            if self.name == "nvidia.ko" else None


def read(name: str, data: bytes) -> Module:
    """Parse one .ko (BadInput naming it if it is not a kernel module)."""
    payload, signature = _split_signature(data)
    return _parse(name, io.BytesIO(payload), signature, len(data))


def read_file(path: Path) -> Module:
    """Parse one .ko file, reading only the parts the checks need (its ELF headers and three sections) unless it is
    signed: a signature's digest covers the whole module. A warm `ensure` reads 67 MB of modules less per image."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - len(SIG_MAGIC)))
        if handle.read() == SIG_MAGIC:
            handle.seek(0)
            return read(path.name, handle.read())
        handle.seek(0)
        return _parse(path.name, handle, None, size)


def _parse(name: str, stream: BinaryIO, signature: Signature | None, size: int) -> Module:
    try:
        elf = ELFFile(stream)
        modinfo = elf.get_section_by_name(".modinfo")
        if modinfo is None:
            raise BadInput(f"{name}: not a kernel module (no .modinfo section)")
        info: dict[str, list[str]] = {}
        for item in modinfo.data().split(b"\0"):
            if b"=" in item:
                key, _, value = item.decode(errors="replace").partition("=")
                info.setdefault(key, []).append(value)
        imports: dict[str, int] = {}
        versions = elf.get_section_by_name("__versions")
        if versions is not None:
            raw = versions.data()
            word = 8 if elf.elfclass == 64 else 4
            entry = 64
            fmt = ("<" if elf.little_endian else ">") + ("Q" if word == 8 else "I")
            for off in range(0, len(raw) - entry + 1, entry):
                (crc,) = struct.unpack_from(fmt, raw, off)
                sym = raw[off + word:off + entry].split(b"\0", 1)[0].decode(errors="replace")
                if sym:
                    imports[sym] = crc & 0xFFFFFFFF
        strings = elf.get_section_by_name("__ksymtab_strings")
        exports = frozenset(s.decode(errors="replace") for s in strings.data().split(b"\0") if s) \
            if strings is not None else frozenset()
    except ELFError as err:
        raise BadInput(f"{name}: not a readable ELF kernel module: {err}") from None
    machine = str(elf.header["e_machine"])
    return Module(name=name, info=info, imports=imports, exports=exports, signature=signature, size=size,
                  arch=ELF_ARCH.get(machine, machine))


def _split_signature(data: bytes) -> tuple[bytes, Signature | None]:
    if not data.endswith(SIG_MAGIC):
        return data, None
    end = len(data) - len(SIG_MAGIC)
    algo, hash_, id_type, signer_len, key_id_len, sig_len = _SIG_STRUCT.unpack_from(data, end - _SIG_STRUCT.size)
    start = end - _SIG_STRUCT.size - sig_len - signer_len - key_id_len
    pkcs7 = data[end - _SIG_STRUCT.size - sig_len:end - _SIG_STRUCT.size]
    if start < 0:
        return data, Signature(id_type, signer_len, key_id_len, sig_len, b"", malformed="truncated signature")
    payload = data[:start]
    if id_type != 2:  # PKEY_ID_PKCS7: the only kind the kernel reads (mod_check_sig)
        return payload, Signature(id_type, signer_len, key_id_len, sig_len, pkcs7,
                                  malformed=f"signature type {id_type}, not PKCS#7")
    if algo or hash_ or signer_len or key_id_len:
        return payload, Signature(id_type, signer_len, key_id_len, sig_len, pkcs7,
                                  malformed="struct module_signature fields the kernel requires to be 0 are not")

    try:
        signed_by = modsig.parse(pkcs7)
        digest = modsig.content_digest(signed_by.digest_algorithm, payload)
    except modsig.Malformed as err:
        return payload, Signature(id_type, signer_len, key_id_len, sig_len, pkcs7, malformed=str(err))
    return payload, Signature(id_type=id_type, signer_len=signer_len, key_id_len=key_id_len, length=sig_len,
                              pkcs7=pkcs7, signed_by=signed_by, content_digest=digest)
