"""Whether a module compile may leave out debug information.

The modules are stripped of it after the compile (`strip --strip-debug`), and GCC's code does not depend on `-g`, so
compiling without it (`KCFLAGS=-g0`, appended after the kernel's own flags) gives the same machine code for about an
eighth less compile time. Two kernel features read the DWARF itself during the build, and keep it:
- CONFIG_GENDWARFKSYMS: the symbol versions (modversions' CRCs) are computed from the module's DWARF;
- CONFIG_DEBUG_INFO_BTF_MODULES with the kernel's vmlinux at hand: each module's BTF is made from its DWARF (without
  vmlinux, as in Debian's headers packages, kbuild skips it).
"""

from __future__ import annotations

_KEEP_ALWAYS = ("CONFIG_GENDWARFKSYMS",)
_KEEP_WITH_VMLINUX = ("CONFIG_DEBUG_INFO_BTF_MODULES",)


def _enabled(config: str) -> set[str]:
    """The options a kernel .config sets to y or m."""
    return {name for name, _, value in (line.strip().partition("=") for line in config.splitlines())
            if not name.startswith("#") and value in ("y", "m")}


def needed(config: str | None, vmlinux_present: bool) -> bool:
    """Whether the compile must keep -g for the kernel whose .config this is (None: its headers have none, so
    nothing says the DWARF is unused: keep it)."""
    if config is None:
        return True
    on = _enabled(config)
    return any(o in on for o in _KEEP_ALWAYS) or (vmlinux_present and any(o in on for o in _KEEP_WITH_VMLINUX))


def make_flags(config: str | None, vmlinux_present: bool) -> str:
    """What to add to `make modules` for this kernel: ' KCFLAGS=-g0', or nothing when the DWARF is needed."""
    return "" if needed(config, vmlinux_present) else " KCFLAGS=-g0"
