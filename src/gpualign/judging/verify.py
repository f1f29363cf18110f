"""The kernel's own load checks, offline, for a set of modules against one kernel. Pure.

At `insmod` the kernel refuses a module built for another CPU ("Invalid architecture in ELF header"), one whose
version magic names another release ("version magic '…' should be '…'"), and, with CONFIG_MODVERSIONS, one whose CRC
for an imported symbol differs from its own ("disagrees about version of symbol …"), or that imports a symbol nobody
exports ("Unknown symbol …"). Symbols the modules of the set export to each other (nvidia-uvm imports from nvidia)
are checked against no kernel. With signatures enforced (Secure Boot), `trusted` is the keys the kernel holds, and
each module's signature is checked too (modsig). """

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpualign.judging.kmod import Module
from gpualign.model.kernels import Kernel

if TYPE_CHECKING:
    from cryptography import x509


LOAD_ORDER = {"nvidia.ko": 0, "nvidia-uvm.ko": 1, "nvidia-modeset.ko": 2, "nvidia-drm.ko": 3, "nvidia-peermem.ko": 4}


@dataclass(frozen=True)
class ModuleResult:
    module: str
    symbols_checked: int
    mismatched: tuple[str, ...]  # symbols whose CRC differs, or that nobody exports
    problems: tuple[str, ...]  # in the kernel's words, first mismatch first
    signer: str | None = None  # when signatures were checked: the signer's name and key id, as modinfo shows them
    key_id: str | None = None
    signature_ok: bool | None = None  # None: not checked


@dataclass(frozen=True)
class Verification:
    kernel: str
    driver_version: str
    results: tuple[ModuleResult, ...] = field(default=())
    signatures_checked: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.results) and not any(r.problems for r in self.results)

    @property
    def symbols_checked(self) -> int:
        return sum(r.symbols_checked for r in self.results)

    @property
    def mismatches(self) -> int:
        return sum(len(r.mismatched) for r in self.results)

    def first_problem(self) -> str | None:
        for r in self.results:
            if r.problems:
                more = len(r.problems) - 1
                return f"{r.problems[0]}" + (f" (and {more} more problems in {r.module})" if more else "")
        return None if self.results else "no kernel module found"

    def first_refusal(self) -> str | None:
        """What the kernel would refuse first, loading the set as modprobe does (nvidia first, then nvidia-uvm,
        nvidia-modeset, nvidia-drm): in the first module it refuses, the signature (module_sig_check), then the ELF
        header's CPU (elf_validity_check), then a symbol (a kernel with CONFIG_MODVERSIONS compares vermagic without
        its release and refuses on the CRCs), then anything else. check, ensure and the lab's kernel name this same
        refusal."""
        refused = self.first_refused()
        return refused[1] if refused else None if self.results else "no kernel module found"

    def first_refused(self) -> tuple[str, str] | None:
        """The module the kernel would refuse first and its refusal, as `first_refusal` names it."""
        def rank(problem: str) -> int:
            return 0 if "rejected by service" in problem or "(Bad message)" in problem else \
                1 if "Invalid architecture" in problem else 2 if "symbol" in problem else 3

        for r in sorted(self.results, key=lambda r: (LOAD_ORDER.get(r.module, 9), r.module)):
            if r.problems:
                return r.module, min(r.problems, key=rank)
        return None

    def first_symbol(self) -> str | None:
        """The first refused symbol, in the kernel's words ("nvidia: disagrees about version of symbol …")."""
        for r in self.results:
            for p in r.problems:
                if "symbol" in p:
                    return p
        return None

    def as_dict(self) -> dict[str, object]:
        return {"kernel": self.kernel, "driver_version": self.driver_version, "ok": self.ok,
                "modules": len(self.results), "symbols_checked": self.symbols_checked,
                "mismatches": self.mismatches, "first_problem": self.first_problem(),
                "first_refused_symbol": self.first_symbol(),
                "signatures_checked": self.signatures_checked,
                "per_module": [{"module": r.module, "symbols_checked": r.symbols_checked,
                                "mismatches": len(r.mismatched),
                                **({"signer": r.signer, "key_id": r.key_id, "signature_ok": r.signature_ok}
                                   if self.signatures_checked else {})} for r in self.results]}


def verify(modules: Sequence[Module], kernel: str, symvers: Mapping[str, int], driver_version: str,
           trusted: Sequence[x509.Certificate] | None = None) -> Verification:
    """kernel: the release in the image's tag (uname -r on the node); symvers: that kernel's Module.symvers;
    trusted: with signatures enforced, the keys the kernel holds (None: signatures are not checked)."""
    among = frozenset().union(*(m.exports for m in modules)) if modules else frozenset()
    arch = Kernel.of(kernel).arch
    results = []
    for m in sorted(modules, key=lambda x: x.name):
        short = m.name.removesuffix(".ko")
        problems: list[str] = []
        sig = None  # the kernel checks the signature first (module_sig_check), then the version magic, then CRCs
        if trusted is not None:
            from gpualign.judging import modsig  # only when signatures are checked

            sig = m.signature.check(trusted) if m.signature else modsig.check(None, None, trusted)
            if sig.problem:
                problems.append(f"{short}: {sig.problem}")
        if arch is not None and m.arch is not None and m.arch != arch:  # elf_validity_check, before anything else
            problems.append(f"{short}: Invalid architecture in ELF header ({m.arch} module, {kernel} is {arch})")
        if m.release != kernel:
            problems.append(f"{short}: version magic '{m.vermagic}' should be '{kernel} …' (built for "
                            f"{m.release or 'no kernel'})")
        version = m.field("version")
        if version != driver_version:
            problems.append(f"{short}: driver version {version or '(none)'} is not {driver_version}")
        checked, mismatched = 0, []
        for sym, crc in sorted(m.imports.items()):
            if sym in symvers:
                checked += 1
                if symvers[sym] != crc:
                    mismatched.append(sym)
                    problems.append(f"{short}: disagrees about version of symbol {sym} (module 0x{crc:08x}, "
                                    f"kernel {kernel} 0x{symvers[sym]:08x})")
            elif sym not in among:
                mismatched.append(sym)
                problems.append(f"{short}: Unknown symbol {sym} (kernel {kernel} does not export it)")
        results.append(ModuleResult(module=m.name, symbols_checked=checked, mismatched=tuple(mismatched),
                                    problems=tuple(problems),
                                    signer=sig.signer if sig else None, key_id=sig.key_id if sig else None,
                                    signature_ok=sig.ok if sig else None))
    return Verification(kernel, driver_version, tuple(results), trusted is not None)
