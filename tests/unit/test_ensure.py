"""ensure's pure parts: tags taken apart, what is built here, Module.symvers, a module's ELF records, and the
kernel's load checks. The modules here are small ELF files written by the test with the kernel's section layouts;
the real NVIDIA modules are checked in tests/integration/test_ensure_build.py, against modinfo and modprobe."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.judging import kmod, symvers, tagspec
from gpualign.judging.verify import verify
from gpualign.loaders.rules import load_rules
from gpualign.model import driver_tag
from tests.support.kmods import KERNEL, TABLE, VERMAGIC, fake_ko

DEBIAN = load_rules(archive_reading=False).debian  # the rules' copy of Debian's archives


def module(name: str = "nvidia.ko", vermagic: str = VERMAGIC, version: str = "535.261.03",
           imports: dict[str, int] | None = None, exports: tuple[str, ...] = ()) -> kmod.Module:
    data = fake_ko({"version": version, "vermagic": vermagic, "name": name[:-3]},
                   dict(TABLE) if imports is None else imports, exports)
    return kmod.read(name, data)


def test_tags_are_taken_apart_and_refused_with_the_shape_expected():
    spec = driver_tag.parse("535-6.1.0-50-amd64-debian12")
    assert (spec.branch, spec.kernel, spec.os_tag, spec.family) == ("535", "6.1.0-50-amd64", "debian12", "debian")
    assert driver_tag.parse("registry.local/nvidia/driver:580-5.15.0-124-generic-ubuntu22.04").kernel == \
        "5.15.0-124-generic"
    for bad in ("latest", "535-debian12", "5-6.1.0-50-amd64-debian12", "535-6.1.0-50-amd64-plan9"):
        with pytest.raises(BadInput, match="not a precompiled driver tag"):
            driver_tag.parse(bad)


def test_only_debian_is_built_here_and_each_refusal_says_why():
    assert tagspec.buildable_here(driver_tag.parse("535-6.1.0-50-amd64-debian12"), debian=DEBIAN) == "bookworm"
    with pytest.raises(BadInput, match="Debian bookworm carries NVIDIA 470, 525, 535, not 580"):
        tagspec.buildable_here(driver_tag.parse("580-6.1.0-50-amd64-debian12"), debian=DEBIAN)
    with pytest.raises(BadInput, match="ubuntu22.04 images are not built by gpualign: render the recipe"):
        tagspec.buildable_here(driver_tag.parse("580-5.15.0-124-generic-ubuntu22.04"), debian=DEBIAN)
    with pytest.raises(BadInput, match="gpualign has no recipe for sles15"):
        tagspec.buildable_here(driver_tag.parse("580-5.14.21-150500-default-sles15"), debian=DEBIAN)
    with pytest.raises(BadInput, match="Debian trixie carries NVIDIA 535 only as nvidia-tesla-535-kernel-source"):
        tagspec.buildable_here(driver_tag.parse("535-6.12.117_deb13-amd64-debian13"), debian=DEBIAN)
    assert tagspec.buildable_here(driver_tag.parse("550-6.12.117_deb13-amd64-debian13"), debian=DEBIAN) == "trixie"
    assert tagspec.buildable_here(driver_tag.parse("535-6.1.0-50-arm64-debian12"), debian=DEBIAN) == "bookworm"
    with pytest.raises(BadInput, match="gpualign builds debian12 images for amd64, arm64, not ppc64le"):
        tagspec.buildable_here(driver_tag.parse("535-6.1.0-50-powerpc64le-debian12"), debian=DEBIAN)
    with pytest.raises(BadInput, match=r"kernel 6.12.12_bpo-amd64 \(6.12.12\+bpo-amd64\) is a backports kernel"):
        tagspec.buildable_here(driver_tag.parse("535-6.12.12_bpo-amd64-debian12"), debian=DEBIAN)


def test_a_plus_is_not_a_tag_character_and_the_label_spelling_is_offered():
    """The review's #2: a '+' tag was taken, and looked for headers."""
    with pytest.raises(BadInput, match=r"not a valid image tag: '\+' cannot be in one \(write it as NFD labels the "
                                       r"kernel: 535-6.12.12_bpo-amd64-debian12\)"):
        driver_tag.parse("535-6.12.12+bpo-amd64-debian12")
    with pytest.raises(BadInput, match="not a valid image tag"):
        driver_tag.parse("535-" + "1" * 130 + "-debian12")


def test_no_recipe_is_rendered_for_what_ensure_refuses():
    """The review's #2: a recipe for a backport kernel, noted "built and verified here" seconds after ensure refused
    the same tag."""
    from gpualign.ensure import recipes

    with pytest.raises(BadInput, match="is a backports kernel"):
        recipes.render(driver_tag.parse("535-6.12.12_bpo-amd64-debian12"), "535.261.03")
    assert recipes.render(driver_tag.parse("535-6.1.0-50-amd64-debian12"), "535.261.03").runs_here


def test_module_symvers_lines_and_a_bad_line_named():
    text = "0x1111\tfilp_open\tvmlinux\tEXPORT_SYMBOL\t\n0xdeadbeef\tpci_save_state\tvmlinux\tEXPORT_SYMBOL_GPL\t\n"
    assert symvers.parse(text) == {"filp_open": 0x1111, "pci_save_state": 0xDEADBEEF}
    with pytest.raises(BadInput, match=r"Module.symvers:2: expected 0xCRC"):
        symvers.parse("0x1\ta\tvmlinux\tEXPORT_SYMBOL\nnot a line\n")


def test_a_modules_records_are_read_from_its_sections():
    m = module(exports=("nvidia_p2p_get_pages",))
    assert m.release == KERNEL and m.field("version") == "535.261.03"
    assert m.imports == TABLE and m.exports == {"nvidia_p2p_get_pages"} and m.signature is None
    signed = kmod.read("s.ko", fake_ko({"vermagic": VERMAGIC}, {}, signature=b"\x30\x82pkcs7"))
    assert signed.signature is not None and signed.signature.pkcs7 == b"\x30\x82pkcs7" and signed.release == KERNEL
    with pytest.raises(BadInput, match="x.ko: not a readable ELF kernel module"):
        kmod.read("x.ko", b"not an elf at all")


def test_a_module_file_is_read_as_its_bytes_are_signed_or_not(tmp_path):
    for name, data in (("u.ko", fake_ko({"vermagic": VERMAGIC, "version": "535.261.03"}, dict(TABLE),
                                        ("nvidia_p2p_get_pages",))),
                       ("s.ko", fake_ko({"vermagic": VERMAGIC}, {}, signature=b"\x30\x82pkcs7"))):
        (tmp_path / name).write_bytes(data)
        from_file, from_bytes = kmod.read_file(tmp_path / name), kmod.read(name, data)
        assert (from_file.info, from_file.imports, from_file.exports) == \
            (from_bytes.info, from_bytes.imports, from_bytes.exports)
        assert from_file.size == from_bytes.size == len(data)
        assert (from_file.signature is None) == (name == "u.ko")
        if from_file.signature is not None:
            assert from_file.signature.pkcs7 == from_bytes.signature.pkcs7 == b"\x30\x82pkcs7"
    (tmp_path / "x.ko").write_bytes(b"not an elf at all")
    with pytest.raises(BadInput, match="x.ko: not a readable ELF kernel module"):
        kmod.read_file(tmp_path / "x.ko")


def test_the_kernels_checks_pass_a_matching_set_and_name_the_first_refusal():
    ok = verify([module(), module("nvidia-uvm.ko", imports={**TABLE, "nvidia_p2p_get_pages": 7})
                 ], KERNEL, TABLE, "535.261.03")
    assert ok.ok is False  # nvidia_p2p_get_pages: nobody in the set exports it
    peer = verify([module(exports=("nvidia_p2p_get_pages",)),
                   module("nvidia-uvm.ko", imports={**TABLE, "nvidia_p2p_get_pages": 7})], KERNEL, TABLE, "535.261.03")
    assert peer.ok and peer.symbols_checked == 6 and peer.mismatches == 0  # exported within the set: not checked
    newer = {**TABLE, "filp_open": 0x9999}
    bad = verify([module()], "6.1.0-50-amd64", newer, "535.261.03")
    assert not bad.ok and bad.mismatches == 1
    assert bad.first_problem() == (f"nvidia: version magic '{VERMAGIC}' should be '6.1.0-50-amd64 …' (built for "
                                   f"{KERNEL}) (and 1 more problems in nvidia.ko)")
    crc_only = verify([module()], KERNEL, newer, "535.261.03")
    assert crc_only.first_problem() == ("nvidia: disagrees about version of symbol filp_open (module 0x00001111, "
                                        f"kernel {KERNEL} 0x00009999)")
    assert "driver version 535.104.05 is not 535.261.03" in \
        verify([module(version="535.104.05")], KERNEL, TABLE, "535.261.03").first_problem()
    assert verify([], KERNEL, TABLE, "535.261.03").first_problem() == "no kernel module found"


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,20}", fullmatch=True), st.integers(0, 2**32 - 1), max_size=20),
       st.data())
def test_verification_refuses_exactly_the_symbols_whose_crc_differs(table, data):
    changed = data.draw(st.sets(st.sampled_from(sorted(table)) if table else st.nothing()))
    kernel = {s: (c ^ 1 if s in changed else c) for s, c in table.items()}
    result = verify([module(imports=table)], KERNEL, kernel, "535.261.03")
    assert result.mismatches == len(changed) and result.ok == (not changed)
    assert set(result.results[0].mismatched) == changed
