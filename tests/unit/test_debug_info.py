"""A module compile leaves out debug information only where nothing in the kernel's build reads it: the modules are
stripped of it afterwards, and the machine code does not change (docs/benchmarks.md, "Without debug information")."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpualign.ensure import debug_info

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "kernel-configs"


def test_debians_6_1_kernel_compiles_without_debug_information():
    """Debian's headers ship no vmlinux, so its BTF_MODULES=y makes no module BTF: -g0 is safe."""
    config = (CONFIGS / "6.1.0-50-amd64.debug").read_text()
    assert "CONFIG_DEBUG_INFO_BTF_MODULES=y" in config
    assert debug_info.make_flags(config, vmlinux_present=False) == " KCFLAGS=-g0"
    assert debug_info.make_flags(config, vmlinux_present=True) == ""  # kbuild would make BTF from the DWARF


def test_debians_6_12_kernel_keeps_it_as_its_headers_ship_vmlinux():
    """Debian 13's headers package holds vmlinux, so kbuild makes each module's BTF from its DWARF."""
    config = (CONFIGS / "6.12.118+deb13-amd64.debug").read_text()
    assert "ships vmlinux" in config.splitlines()[0]
    assert debug_info.make_flags(config, vmlinux_present=True) == ""


def test_symbol_versions_from_dwarf_keep_it_and_an_unknown_config_keeps_it():
    assert debug_info.make_flags("CONFIG_MODVERSIONS=y\nCONFIG_GENDWARFKSYMS=y\n", vmlinux_present=False) == ""
    assert debug_info.make_flags(None, vmlinux_present=False) == ""
    assert debug_info.make_flags("# CONFIG_GENDWARFKSYMS is not set\nCONFIG_DEBUG_INFO_BTF_MODULES=n\n",
                                 vmlinux_present=True) == " KCFLAGS=-g0"


_OPTIONS = st.sampled_from(["CONFIG_GENDWARFKSYMS", "CONFIG_DEBUG_INFO_BTF_MODULES", "CONFIG_DEBUG_INFO",
                            "CONFIG_MODVERSIONS", "CONFIG_DEBUG_INFO_BTF"])
_LINES = st.tuples(_OPTIONS, st.sampled_from(["y", "m", "n", "unset"])).map(
    lambda o: f"# {o[0]} is not set" if o[1] == "unset" else f"{o[0]}={o[1]}")


@given(st.lists(_LINES, max_size=8), st.booleans())
def test_the_dwarf_is_dropped_only_when_neither_reader_is_on(lines, vmlinux):
    config = "\n".join(lines)
    on = {line.split("=")[0] for line in lines if line.endswith(("=y", "=m"))}
    keeps = "CONFIG_GENDWARFKSYMS" in on or (vmlinux and "CONFIG_DEBUG_INFO_BTF_MODULES" in on)
    assert (debug_info.make_flags(config, vmlinux) == "") == keeps
