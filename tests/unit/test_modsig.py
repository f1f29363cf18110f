"""Module signatures, checked as the kernel checks them with signatures enforced (Secure Boot). The signatures here
are made by OpenSSL through `cryptography`'s PKCS#7 builder with sign-file's options (detached, binary, no
certificates, no capabilities, no signed attributes), over small ELF modules written by the test; the kernel's own
sign-file on real NVIDIA modules is in tests/integration/test_ensure_build.py, checked there with modinfo and
`openssl cms -verify`."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import NameOID

from gpualign.base.errors import BadInput
from gpualign.ensure import sign
from gpualign.judging import kmod, modsig
from gpualign.judging.verify import verify
from tests.support.kmods import KERNEL, TABLE, VERMAGIC, fake_ko


def keypair(cn: str, curve: bool = False) -> tuple[rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, x509.Certificate]:
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = (
        ec.generate_private_key(ec.SECP256R1()) if curve else rsa.generate_private_key(public_exponent=65537,
                                                                                      key_size=2048))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                                                       "gpualign tests")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


A = keypair("fleet signing key A")
B = keypair("another key B")


def signed(payload: bytes, key: object, cert: x509.Certificate, attributes: bool = False) -> bytes:
    options = [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary, pkcs7.PKCS7Options.NoCerts]
    options.append(pkcs7.PKCS7Options.NoCapabilities if attributes else pkcs7.PKCS7Options.NoAttributes)
    der = (pkcs7.PKCS7SignatureBuilder().set_data(payload).add_signer(cert, key, hashes.SHA256())  # type: ignore[arg-type]
           .sign(serialization.Encoding.DER, options))
    return fake_ko_with(payload, der)


def fake_ko_with(payload: bytes, pkcs7_der: bytes) -> bytes:
    import struct

    return payload + pkcs7_der + struct.pack(">BBBBBxxxI", 0, 0, 2, 0, 0, len(pkcs7_der)) + kmod.SIG_MAGIC


PAYLOAD = fake_ko({"version": "535.261.03", "vermagic": VERMAGIC, "name": "nvidia"}, dict(TABLE))


def test_a_signature_by_a_held_key_verifies_and_is_named_as_modinfo_names_it():
    m = kmod.read("nvidia.ko", signed(PAYLOAD, *A))
    assert m.signature is not None and m.signature.signed_by is not None and m.release == KERNEL
    result = m.signature.check([B[1], A[1]])
    serial = A[1].serial_number.to_bytes((A[1].serial_number.bit_length() + 7) // 8, "big")
    assert result.ok and result.problem is None
    assert result.signer == "fleet signing key A"
    assert result.key_id == ":".join(f"{b:02X}" for b in serial)


def test_each_refusal_is_the_kernels():
    unsigned = kmod.read("nvidia.ko", PAYLOAD)
    by_b = kmod.read("nvidia.ko", signed(PAYLOAD, *B))
    data = bytearray(signed(PAYLOAD, *A))
    data[70] ^= 0x01  # a byte of the module itself, after signing
    tampered = kmod.read("nvidia.ko", bytes(data))
    assert modsig.check(None, None, [A[1]]).problem == \
        "Loading of unsigned module is rejected (Key was rejected by service)"
    assert unsigned.signature is None
    held_b = by_b.signature.check([A[1]]) if by_b.signature else None
    assert held_b is not None and not held_b.ok and held_b.problem is not None
    assert held_b.problem.startswith("Loading of module with unavailable key is rejected (Key was rejected by "
                                     "service): signed by another key B, key ")
    assert tampered.signature is not None
    bad = tampered.signature.check([A[1]])
    assert not bad.ok and bad.problem is not None and "does not verify over the module" in bad.problem


def test_signed_attributes_and_elliptic_keys_verify_as_the_kernel_verifies_them():
    for key, cert in (A, keypair("ec key", curve=True)):
        m = kmod.read("nvidia.ko", signed(PAYLOAD, key, cert, attributes=True))
        assert m.signature is not None and m.signature.signed_by is not None
        assert m.signature.signed_by.signed_attrs is not None
        assert m.signature.check([cert]).ok
        data = bytearray(signed(PAYLOAD, key, cert, attributes=True))
        data[80] ^= 0x01
        tampered = kmod.read("nvidia.ko", bytes(data))
        assert tampered.signature is not None and not tampered.signature.check([cert]).ok


def test_a_malformed_signature_is_a_bad_message_not_a_crash():
    m = kmod.read("nvidia.ko", fake_ko_with(PAYLOAD, b"\x30\x03\x02\x01\x01"))
    assert m.signature is not None and m.signature.malformed
    result = m.signature.check([A[1]])
    assert not result.ok and result.problem is not None and result.problem.endswith("(Bad message)")


def test_verify_with_trusted_keys_adds_the_signature_to_each_modules_checks():
    uvm = fake_ko({"version": "535.261.03", "vermagic": VERMAGIC, "name": "nvidia-uvm"}, dict(TABLE))
    mods = [kmod.read("nvidia.ko", signed(PAYLOAD, *A)), kmod.read("nvidia-uvm.ko", uvm)]
    without = verify(mods, KERNEL, TABLE, "535.261.03")
    assert without.ok and not without.signatures_checked
    enforced = verify(mods, KERNEL, TABLE, "535.261.03", [A[1]])
    assert not enforced.ok and enforced.signatures_checked
    assert enforced.first_problem() == \
        "nvidia-uvm: Loading of unsigned module is rejected (Key was rejected by service)"
    per = {m["module"]: m for m in enforced.as_dict()["per_module"]}  # type: ignore[attr-defined]
    assert per["nvidia.ko"]["signature_ok"] is True and per["nvidia.ko"]["signer"] == "fleet signing key A"
    assert per["nvidia-uvm.ko"]["signature_ok"] is False


def pem(key: object) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # type: ignore[attr-defined]
                             serialization.NoEncryption())


def test_a_signing_key_is_checked_before_any_work():
    cert_a = A[1].public_bytes(serialization.Encoding.PEM)
    loaded = sign.load(pem(A[0]), cert_a, "files")
    assert loaded.signer == "fleet signing key A" and loaded.fingerprint == modsig.fingerprint(A[1])
    assert sign.load(pem(A[0]), A[1].public_bytes(serialization.Encoding.DER), "files").cert == A[1]
    with pytest.raises(BadInput, match="^files: the signing key is not the certificate's key"):
        sign.load(pem(B[0]), cert_a, "files")
    encrypted = A[0].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.BestAvailableEncryption(b"pw"))
    with pytest.raises(BadInput, match="^files: the signing key: it is encrypted"):
        sign.load(encrypted, cert_a, "files")
    with pytest.raises(BadInput, match="^files: the signing certificate: not an X.509"):
        sign.load(pem(A[0]), b"junk", "files")


def test_a_signing_secret_is_read_as_kmm_keeps_it_or_as_a_tls_secret():
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    cert_a = A[1].public_bytes(serialization.Encoding.PEM)
    kmm = {"data": {"key": b64(pem(A[0])), "cert": b64(cert_a)}}
    tls = {"data": {"tls.key": b64(pem(A[0])), "tls.crt": b64(cert_a)}}
    assert sign.from_secret(kmm, "s").cert == A[1] and sign.from_secret(tls, "s").cert == A[1]
    with pytest.raises(BadInput, match=r"^s: holds no signing key: .* \(have: ca.crt\)"):
        sign.from_secret({"data": {"ca.crt": b64(cert_a)}}, "s")
    with pytest.raises(BadInput, match="^s: no such Secret"):
        sign.from_secret(None, "s")
