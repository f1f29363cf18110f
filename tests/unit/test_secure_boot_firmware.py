"""The variable store the kernel load check boots OVMF with under Secure Boot, read back by virt-firmware as the
firmware would read it: the kernel's signer in db, the trusted certificates in MokListRT under shim's GUID (where
Debian's kernel looks, security/integrity/platform_certs/load_uefi.c), MokListTrustedRT set, Secure Boot on."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from gpualign.base.errors import BadInput
from gpualign.judging import secure_boot
from tests.support.certs import self_signed_der as cert


@pytest.fixture
def ovmf():
    if not secure_boot.VARS.exists():
        pytest.fail(f"{secure_boot.VARS} is not installed (Debian's ovmf; scripts/install-debs installs it)")


def test_the_store_holds_the_kernels_signer_in_db_and_the_trusted_keys_as_shim_leaves_them(ovmf, tmp_path):
    from virt.firmware.varstore.edk2 import Edk2VarStore

    signer, fleet, other = cert("Debian Secure Boot Signer (stand-in)"), cert("fleet key A"), cert("fleet key B")
    store = tmp_path / "vars.fd"
    platform = secure_boot._platform_cert(tmp_path)
    secure_boot.write_store(store, [signer], [fleet, other], platform)
    read = Edk2VarStore(str(store)).get_varlist()
    der = {name: [item.x509.public_bytes(Encoding.DER) for item in read[name].sigdb if item.x509]
           for name in ("PK", "KEK", "db", "MokListRT")}
    assert der["db"] == [signer]
    assert der["MokListRT"] == [fleet, other]
    # non-volatile, boot service and runtime: Linux reads it after boot
    assert str(read["MokListRT"].guid) == secure_boot.SHIM_LOCK and read["MokListRT"].attr == 0x7
    assert str(read["MokListTrustedRT"].guid) == secure_boot.SHIM_LOCK and read["MokListTrustedRT"].data == b"\x01"
    assert read["SecureBootEnable"].data == b"\x01"
    pk = x509.load_pem_x509_certificate(platform.read_bytes()).public_bytes(Encoding.DER)
    assert der["PK"] == [pk] and der["KEK"] == [pk]  # no vendor's keys: only what is written here is trusted


def test_a_kernel_image_without_a_signature_or_a_certificate_list_that_is_empty_is_refused(ovmf, tmp_path):
    vmlinuz = tmp_path / "vmlinuz"
    vmlinuz.write_bytes(b"MZ" + b"\0" * 200)
    assert secure_boot.kernel_signers(vmlinuz.read_bytes()) == []
    with pytest.raises(secure_boot.NoSecureBoot, match="its image carries no Secure Boot signature"):
        secure_boot.firmware_for("6.1.0-50-amd64", "amd64", vmlinuz, [cert("A")], tmp_path)
    with pytest.raises(secure_boot.NoSecureBoot, match="no certificate to trust"):
        secure_boot.firmware_for("6.1.0-50-amd64", "amd64", vmlinuz, [], tmp_path)
    with pytest.raises(BadInput, match="neither PEM nor DER"):
        secure_boot.firmware_for("6.1.0-50-amd64", "amd64", vmlinuz, [b"not a certificate"], tmp_path)


def test_an_arm64_store_starts_from_aavmfs_and_trusts_no_vendors_key(tmp_path):
    """AAVMF's empty store is blank flash, so its Secure Boot store (Microsoft's keys) is the template: every key of
    it is replaced, db holding only the kernel's signer."""
    from virt.firmware.varstore.edk2 import Edk2VarStore

    edk2 = secure_boot.FIRMWARE["arm64"]
    if not edk2.template.exists():
        pytest.fail(f"{edk2.template} is not installed (Debian's {edk2.package}; scripts/install-debs installs it)")
    signer, fleet = cert("Debian arm64 signer (stand-in)"), cert("fleet key A")
    store = tmp_path / "vars.fd"
    secure_boot.write_store(store, [signer], [fleet], secure_boot._platform_cert(tmp_path), edk2.template)
    read = Edk2VarStore(str(store)).get_varlist()
    assert [i.x509.public_bytes(Encoding.DER) for i in read["db"].sigdb if i.x509] == [signer]
    assert [i.x509.public_bytes(Encoding.DER) for i in read["MokListRT"].sigdb if i.x509] == [fleet]
    assert len([i for i in read["KEK"].sigdb if i.x509]) == 1  # the platform key alone, no Microsoft KEK
