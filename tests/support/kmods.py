"""Small kernel modules written by the tests: relocatable ELF files with the kernel's section layouts."""

from __future__ import annotations

import struct

from gpualign.judging import kmod


def fake_ko(info: dict[str, str], imports: dict[str, int], exports: tuple[str, ...] = (),
            signature: bytes | None = None, machine: int = 62) -> bytes:
    """A relocatable ELF with .modinfo, __versions and __ksymtab_strings, as modpost lays them out; machine: its
    e_machine (62: x86-64, 183: AArch64)."""
    modinfo = b"".join(f"{k}={v}".encode() + b"\0" for k, v in info.items())
    versions = b"".join(struct.pack("<Q", crc) + name.encode().ljust(56, b"\0") for name, crc in imports.items())
    ksymtab = b"".join(e.encode() + b"\0" for e in exports)
    sections = [(".modinfo", 1, modinfo), ("__versions", 1, versions), ("__ksymtab_strings", 1, ksymtab)]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, offsets = b"", []
    for _, _, data in [*sections, (".shstrtab", 3, shstrtab)]:
        offsets.append(64 + len(body))
        body += data
    shoff = 64 + len(body)
    names, pos = [], 1
    for n, _, _ in sections:
        names.append(pos)
        pos += len(n) + 1
    names.append(pos)
    headers = b"\0" * 64
    for (_, typ, data), off, name in zip([*sections, (".shstrtab", 3, shstrtab)], offsets, names, strict=True):
        headers += struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, len(data), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections) + 2,
                                 len(sections) + 1)
    elf = header + body + headers
    if signature is not None:
        elf += signature + struct.pack(">BBBBBxxxI", 0, 0, 2, 0, 0, len(signature)) + kmod.SIG_MAGIC
    return elf


KERNEL = "6.1.0-47-amd64"


VERMAGIC = f"{KERNEL} SMP preempt mod_unload modversions "


TABLE = {"filp_open": 0x1111, "pci_save_state": 0x2222, "try_module_get": 0x3333}
