"""A kernel module's appended signature, checked as the kernel checks it at load. Pure (bytes in).

`sign-file` (scripts/sign-file.c, shipped in Debian's linux-kbuild with the headers) appends a detached PKCS#7
(CMS SignedData: no certificates, and by default no signed attributes) that names its signer by issuer and serial
number (or, with -k, by subject key identifier). The kernel (kernel/module/signing.c, crypto/asymmetric_keys/) finds
that key in its keyrings (built-in, secondary, and on Secure Boot machines the platform/MOK keys) and verifies the
signature over the module's bytes before the signature. With enforcement (Secure Boot's lockdown, or
module.sig_enforce=1) it refuses:
- an unsigned module: "Loading of unsigned module is rejected";
- one signed by a key it does not hold: "Loading of module with unavailable key is rejected";
both as EKEYREJECTED, which insmod prints as "Key was rejected by service". A signature that does not verify with
the key it names is refused as EKEYREJECTED even without enforcement.

asn1crypto reads the CMS structure (the `cryptography` package signs PKCS#7 but has no public API to read a
SignerInfo); `cryptography` verifies the signature with the certificate's public key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from asn1crypto import cms
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

REJECTED = "Key was rejected by service"
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1, "sha224": hashes.SHA224, "sha256": hashes.SHA256, "sha384": hashes.SHA384,
    "sha512": hashes.SHA512}


class Malformed(ValueError):
    """The appended signature is not a PKCS#7 message the kernel would parse (EBADMSG)."""


@dataclass(frozen=True)
class SignedBy:
    """The one SignerInfo of a module signature."""

    issuer: str  # readable
    issuer_der: bytes  # the Name, as DER: compared byte for byte with a certificate's issuer
    issuer_cn: str  # what modinfo prints as `signer`
    serial: int | None  # with an issuer: what modinfo prints as `sig_key`
    skid: bytes | None  # when signed with -k (subject key identifier)
    digest_algorithm: str  # sha256, ...
    signature: bytes
    signed_attrs: bytes | None  # DER of the signed attributes as a SET, when present (they are what was signed)
    message_digest: bytes | None  # the content digest the signed attributes carry

    @property
    def key_id(self) -> str:
        """As modinfo prints `sig_key`: the serial number (or SKID) in colon-separated hex."""
        if self.serial is not None:
            raw = self.serial.to_bytes(max(1, (self.serial.bit_length() + 7) // 8), "big")
        else:
            raw = self.skid or b""
        return ":".join(f"{b:02X}" for b in raw)


def parse(pkcs7: bytes) -> SignedBy:
    """The signer of a module's PKCS#7 signature (Malformed if the kernel could not parse it)."""
    try:
        info = cms.ContentInfo.load(pkcs7)
        if info["content_type"].native != "signed_data":
            raise Malformed(f"a PKCS#7 {info['content_type'].native}, not signed data")
        signers = info["content"]["signer_infos"]
        if len(signers) != 1:
            raise Malformed(f"{len(signers)} signers; the kernel expects exactly one")
        signer = signers[0]
        sid = signer["sid"]
        issuer, issuer_der, issuer_cn, serial, skid = "", b"", "", None, None
        if sid.name == "issuer_and_serial_number":
            name = sid.chosen["issuer"]
            issuer, issuer_der = name.human_friendly, name.dump()
            issuer_cn = str(name.native.get("common_name", "")) if isinstance(name.native, dict) else ""
            serial = int(sid.chosen["serial_number"].native)
        else:
            skid = bytes(sid.chosen.native)
        algorithm = str(signer["digest_algorithm"]["algorithm"].native)
        attrs = signer["signed_attrs"]
        signed_attrs, message_digest = None, None
        if attrs.native is not None and len(attrs):
            # Signed over the attributes' DER with a SET tag, not the implicit [0] they carry in the SignerInfo.
            signed_attrs = b"\x31" + attrs.dump()[1:]
            for attr in attrs:
                if attr["type"].native == "message_digest":
                    message_digest = bytes(attr["values"][0].native)
        return SignedBy(issuer=issuer, issuer_der=issuer_der, issuer_cn=issuer_cn, serial=serial, skid=skid,
                        digest_algorithm=algorithm, signature=bytes(signer["signature"].native),
                        signed_attrs=signed_attrs, message_digest=message_digest)
    except Malformed:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as err:
        raise Malformed(f"not a PKCS#7 message: {err}") from None


def content_digest(algorithm: str, payload: bytes) -> bytes:
    """The digest of the module's bytes before the signature, with the signature's own algorithm."""
    if algorithm not in _HASHES:
        raise Malformed(f"digest algorithm {algorithm!r} is not one the kernel verifies here")
    return hashlib.new(algorithm, payload).digest()


def names(signer: SignedBy, cert: x509.Certificate) -> bool:
    """Whether the signature names this certificate's key, as the kernel's keyring lookup matches it."""
    if signer.serial is not None:
        return cert.serial_number == signer.serial and cert.issuer.public_bytes() == signer.issuer_der
    try:
        ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        return False
    return ski == signer.skid


def verifies(signer: SignedBy, digest: bytes, cert: x509.Certificate) -> bool:
    """Whether the signature verifies, with the certificate's public key, over a module whose content digest is
    `digest` (or over the signed attributes, when they carry that digest)."""
    hash_cls = _HASHES.get(signer.digest_algorithm)
    if hash_cls is None:
        return False
    if signer.signed_attrs is not None:
        if signer.message_digest != digest:
            return False
        data, prehashed = signer.signed_attrs, False
    else:
        data, prehashed = digest, True
    key = cert.public_key()
    algorithm: hashes.HashAlgorithm | utils.Prehashed = utils.Prehashed(hash_cls()) if prehashed else hash_cls()
    try:
        if isinstance(key, rsa.RSAPublicKey):
            key.verify(signer.signature, data, padding.PKCS1v15(), algorithm)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signer.signature, data, ec.ECDSA(algorithm))
        else:
            return False
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class SigCheck:
    ok: bool
    problem: str | None  # in the kernel's words
    signer: str | None = None
    key_id: str | None = None


def check(signer: SignedBy | None, digest: bytes | None, trusted: Sequence[x509.Certificate],
          malformed: str | None = None) -> SigCheck:
    """The kernel's verdict, with signatures enforced and `trusted` the keys it holds."""
    if malformed is not None:
        return SigCheck(False, f"module signature malformed: {malformed} (Bad message)")
    if signer is None or digest is None:
        return SigCheck(False, f"Loading of unsigned module is rejected ({REJECTED})")
    key = next((c for c in trusted if names(signer, c)), None)
    who = signer.issuer_cn or signer.issuer or "(no name)"
    if key is None:
        return SigCheck(False, f"Loading of module with unavailable key is rejected ({REJECTED}): signed by "
                               f"{who}, key {signer.key_id}, which the kernel does not hold", who, signer.key_id)
    if not verifies(signer, digest, key):
        return SigCheck(False, f"module signature by {who} (key {signer.key_id}) does not verify over the module "
                               f"({REJECTED})", who, signer.key_id)
    return SigCheck(True, None, who, signer.key_id)


def load_certs(pem_or_der: bytes) -> list[x509.Certificate]:
    """Certificates from PEM (one or more) or DER bytes (ValueError if none)."""
    if b"-----BEGIN CERTIFICATE-----" in pem_or_der:
        return list(x509.load_pem_x509_certificates(pem_or_der))
    return [x509.load_der_x509_certificate(pem_or_der)]


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()
