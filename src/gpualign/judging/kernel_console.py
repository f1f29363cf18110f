"""What a kernel said when a driver image's modules were loaded into it (gpualign.judging.kernel_boot boots it):
its console read into a verdict. Pure: the console's text in, the verdict out.

The VM's init loads each module with insmod, between markers (`GPUALIGN insmod NAME`, `GPUALIGN rc NAME N`), and
ends with `GPUALIGN done`. The kernel's own modules come first (the dependencies, in modules.dep's order), then
NVIDIA's nvidia.ko. On a machine without a GPU, nvidia.ko gets as far as a kernel can take it: every symbol resolved,
version magic and modversions checked, its signature where signatures are enforced, its init run, which stops at
`NVRM: No NVIDIA GPU found.` and returns ENODEV. That line is the pass. NVIDIA's other modules (nvidia-uvm,
nvidia-modeset, nvidia-drm, nvidia-peermem) import nvidia.ko's symbols, so they cannot be loaded without a GPU: the
verdict says so rather than claim them.

Anything else fails, quoting the kernel: an unknown symbol, a symbol whose version disagrees, an invalid module
format, a rejected key, an oops; or a kernel that never finished (no `GPUALIGN done`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

MARK = "GPUALIGN"
NO_GPU = "No NVIDIA GPU found"  # NVRM's words, the proprietary and the open modules alike, at the end of init
_REFUSED = re.compile(r"Unknown symbol|disagrees about version of symbol|Invalid module format|version magic|"
                      r"Key was rejected|Loading of [\w ]*module[\w ]* is rejected|"
                      r"BUG:|Oops|general protection fault|Call Trace|"
                      r"Kernel panic")
_INSMOD = re.compile(rf"^{MARK} insmod (?P<name>\S+)$")
_RC = re.compile(rf"^{MARK} rc (?P<name>\S+) (?P<rc>-?\d+)$")
_LOCKDOWN = re.compile(rf"^{MARK} lockdown \[(?P<state>\w*)\]$")
_MARKER = re.compile(rf"{MARK} (?:insmod \S+|rc \S+ -?\d+|lockdown \[\w*\]|done)")
LOCKED = ("integrity", "confidentiality")  # lockdown states that enforce module signatures


class Load(StrEnum):
    ACCEPTED = "accepted"  # nvidia.ko got to "No NVIDIA GPU found": the kernel took it
    REFUSED = "refused"  # the kernel refused a module (its words quoted)
    UNFINISHED = "unfinished"  # the VM never said it was done (a panic, a hang, a timeout)


@dataclass(frozen=True)
class Attempt:
    module: str  # nvidia, drm, ...
    rc: int | None  # insmod's exit status (None: never returned)
    lines: tuple[str, ...]  # what the kernel and insmod said meanwhile


@dataclass(frozen=True)
class KernelVerdict:
    kernel: str
    load: Load
    said: tuple[str, ...]  # the kernel's own lines that decided it
    attempts: tuple[Attempt, ...] = ()
    not_loaded: tuple[str, ...] = ()  # NVIDIA's modules that need nvidia.ko loaded, which needs a GPU
    seconds: float | None = None
    accel: str = ""  # kvm or tcg
    lockdown: str = ""  # under Secure Boot, the kernel's lockdown state (integrity): it enforced signatures
    trusted: tuple[str, ...] = ()  # under Secure Boot, the certificates it held for modules (their subjects)
    console: str = field(default="", repr=False, compare=False)  # everything the VM printed, for a record

    @property
    def ok(self) -> bool:
        return self.load is Load.ACCEPTED

    def line(self) -> str:
        said = "; ".join(self.said) if self.said else "(nothing)"
        took = f" in {self.seconds:.1f} s ({self.accel})" if self.seconds is not None else ""
        if self.lockdown:
            took += f" under Secure Boot (lockdown {self.lockdown}, trusting {', '.join(self.trusted) or 'no key'})"
        if self.ok:
            return f"kernel {self.kernel} accepted the modules{took}: {said}"
        return f"kernel {self.kernel} {self.load} the modules{took}: {said}"

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "verdict": str(self.load), "said": list(self.said),
                "attempts": [{"module": a.module, "rc": a.rc, "lines": list(a.lines)} for a in self.attempts],
                "not_loaded": list(self.not_loaded), "seconds": round(self.seconds, 2) if self.seconds else None,
                "accel": self.accel or None,
                "secure_boot": {"lockdown": self.lockdown, "trusted": list(self.trusted)} if self.lockdown else None}


def read(kernel: str, console: str, needs_nvidia: tuple[str, ...] = ()) -> KernelVerdict:
    """The verdict of one boot's console: every attempt with the kernel's lines between its markers."""
    attempts: list[Attempt] = []
    current: str | None = None
    lines: list[str] = []
    done, lockdown = False, ""
    for line in _lines(console):
        if (m := _LOCKDOWN.match(line)) is not None:
            lockdown = m.group("state")
            continue
        if (m := _INSMOD.match(line)) is not None:
            current, lines = m.group("name"), []
            continue
        if (m := _RC.match(line)) is not None and current is not None and current == m.group("name"):
            attempts.append(Attempt(current, int(m.group("rc")), tuple(lines)))
            current = None
            continue
        if line == f"{MARK} done":
            done = True
            continue
        if current is not None and line not in lines:  # a line the console echoes twice, once
            lines.append(line)
    if current is not None:  # the kernel stopped inside an insmod
        attempts.append(Attempt(current, None, tuple(lines)))
    import dataclasses

    return dataclasses.replace(_verdict(kernel, attempts, done, console, needs_nvidia), console=console,
                               lockdown=lockdown)


def _verdict(kernel: str, attempts: list[Attempt], done: bool, console: str,
             needs_nvidia: tuple[str, ...]) -> KernelVerdict:
    for a in attempts:
        refused = tuple(line for line in a.lines if _REFUSED.search(line))
        if a.module == "nvidia":
            if any(NO_GPU in line for line in a.lines) and not refused:
                said = tuple(line for line in a.lines if NO_GPU in line)[:1]
                return KernelVerdict(kernel, Load.ACCEPTED, said, tuple(attempts), needs_nvidia)
            if refused or a.rc not in (0, None):
                return KernelVerdict(kernel, Load.REFUSED, refused or a.lines[-3:], tuple(attempts), needs_nvidia)
        elif refused or (a.rc is not None and a.rc != 0):  # the kernel's own module: it must load
            return KernelVerdict(kernel, Load.REFUSED, refused or a.lines[-3:] or
                                 (f"insmod {a.module}: exit {a.rc}",), tuple(attempts), needs_nvidia)
    if not done or not any(a.module == "nvidia" for a in attempts):
        tail = tuple(_lines(console)[-5:])
        return KernelVerdict(kernel, Load.UNFINISHED, tail, tuple(attempts), needs_nvidia)
    return KernelVerdict(kernel, Load.REFUSED, ("nvidia.ko loaded without saying it found no GPU",),
                         tuple(attempts), needs_nvidia)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc")
_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def _lines(console: str) -> list[str]:
    """The console's lines, each marker on a line of its own: the kernel's messages and init's echo share one
    serial line, and one may land in the middle of the other."""
    out: list[str] = []
    for raw in re.split(r"[\r\n]+", console):
        line = _clean(raw)
        while (m := _MARKER.search(line)) is not None:
            before, line = line[:m.start()].strip(), line[m.end():].strip()
            out.extend(x for x in (before, m.group(0)) if x)
        if line:
            out.append(line)
    return out


def _clean(raw: str) -> str:
    """A console line without terminal escapes or the kernel's timestamp."""
    return _STAMP.sub("", _ANSI.sub("", raw)).strip()
