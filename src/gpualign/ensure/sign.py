"""Signing for Secure Boot, as KMM does it: every module signed with the kernel's own `sign-file`, from the kbuild
tree of that kernel's headers (Debian: /usr/src/linux-headers-<kernel>/scripts/sign-file, in linux-kbuild), with the
hash the kernel was configured for (CONFIG_MODULE_SIG_HASH). It runs in the build root, under chroot, like the
compile. The signed modules are cached beside the unsigned ones, keyed by the certificate's SHA-256, so a second run
with the same key signs nothing again; the private key is copied into the build root only for the signing and
removed after it.

What is checked afterwards (modsig, in `verify`) is what the kernel checks: the signature names this certificate's
key (issuer and serial number), and it verifies over the module with the certificate's public key.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpualign.base.errors import BadInput
from gpualign.ensure.buildroot import BuildError, kernel_config
from gpualign.ensure.debian import Progress, _run, modules_dir
from gpualign.judging import modsig


@dataclass(frozen=True)
class SigningKey:
    key_pem: bytes
    cert: x509.Certificate
    where: str  # for messages: the files or the Secret it came from

    @property
    def fingerprint(self) -> str:
        return modsig.fingerprint(self.cert)

    @property
    def signer(self) -> str:
        names = self.cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return str(names[0].value) if names else self.cert.subject.rfc4514_string()

    def describe(self) -> dict[str, str]:
        serial = self.cert.serial_number
        raw = serial.to_bytes(max(1, (serial.bit_length() + 7) // 8), "big")
        return {"signer": self.signer, "key_id": ":".join(f"{b:02X}" for b in raw), "cert_sha256": self.fingerprint}


def load(key: bytes, cert: bytes, where: str) -> SigningKey:
    """A private key (PEM, unencrypted, as sign-file reads it) and its X.509 certificate (PEM or DER), checked to be
    a pair (BadInput naming `where` otherwise)."""
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as err:
        reason = "it is encrypted (sign-file needs it unencrypted)" if "encrypted" in str(err).lower() or \
            isinstance(err, TypeError) else "not a PEM private key"
        raise BadInput(f"{where}: the signing key: {reason}") from None
    try:
        certs = modsig.load_certs(cert)
    except ValueError:
        raise BadInput(f"{where}: the signing certificate: not an X.509 certificate (PEM or DER)") from None
    if not certs:
        raise BadInput(f"{where}: the signing certificate: none found")
    public = certs[0].public_key().public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    mine = private.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    if public != mine:
        raise BadInput(f"{where}: the signing key is not the certificate's key (they are not a pair)")
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return SigningKey(pem, certs[0], where)


def from_files(key: Path, cert: Path) -> SigningKey:
    for path, what in ((key, "--sign-key"), (cert, "--sign-cert")):
        if not path.is_file():
            raise BadInput(f"{what} {path}: no such file")
    return load(key.read_bytes(), cert.read_bytes(), f"--sign-key {key} / --sign-cert {cert}")


def kernel_hash(rootfs: Path, kernel: str) -> str:
    """CONFIG_MODULE_SIG_HASH of the kernel, from its headers' .config (sha256 when it does not say)."""
    config = kernel_config(rootfs, kernel)
    m = re.search(r'^CONFIG_MODULE_SIG_HASH="([a-z0-9]+)"', config, re.M) if config is not None else None
    return m.group(1) if m else "sha256"


def sign_modules(rootfs: Path, kernel: str, flavour: str, driver_version: str, unsigned: list[Path],
                 key: SigningKey, progress: Progress = lambda _m: None) -> list[Path]:
    """The modules signed with `key` (from the cache when signed before with the same certificate)."""
    out = modules_dir(kernel, flavour, driver_version, key.fingerprint)
    if (out / ".complete").exists():
        progress(f"sign: cached (signed by {key.signer})")
        return sorted(out.glob("*.ko"))
    tool = f"/usr/src/linux-headers-{kernel}/scripts/sign-file"
    if not (rootfs / tool.lstrip("/")).exists():
        raise BuildError(f"{kernel}'s headers have no scripts/sign-file (linux-kbuild) in the build root {rootfs}")
    algorithm = kernel_hash(rootfs, kernel)
    progress(f"sign: {len(unsigned)} modules with {key.signer}'s key ({algorithm}, the kernel's sign-file)")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sign.", dir=rootfs / "tmp"))
    inside = "/" + str(work.relative_to(rootfs))
    try:
        os.chmod(work, 0o700)
        (work / "key.pem").write_bytes(key.key_pem)
        os.chmod(work / "key.pem", 0o600)
        (work / "cert.pem").write_bytes(key.cert.public_bytes(serialization.Encoding.PEM))
        for ko in unsigned:
            shutil.copy2(ko, work / ko.name)
        script = "set -e; " + "; ".join(f"{tool} {algorithm} {inside}/key.pem {inside}/cert.pem {inside}/{ko.name}"
                                        for ko in unsigned)
        t0 = time.monotonic()
        _run(["chroot", str(rootfs), "/bin/sh", "-c", script], f"signing the modules for {kernel}")
        (work / "key.pem").unlink()
        staging = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))
        for ko in unsigned:
            shutil.move(str(work / ko.name), staging / ko.name)
        (staging / ".complete").write_text(f"{time.monotonic() - t0:.1f}\n{key.describe()}\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return sorted(out.glob("*.ko"))


def from_secret(obj: dict[str, object] | None, where: str) -> SigningKey:
    """A signing key from a Secret, as KMM keeps it (data keys `key` and `cert`), or a kubernetes.io/tls Secret
    (`tls.key`, `tls.crt`)."""
    import base64
    import binascii

    if obj is None:
        raise BadInput(f"{where}: no such Secret")
    data = obj.get("data")
    data = data if isinstance(data, dict) else {}
    for key_name, cert_name in (("key", "cert"), ("tls.key", "tls.crt")):
        if key_name in data and cert_name in data:
            try:
                key = base64.b64decode(str(data[key_name]), validate=True)
                cert = base64.b64decode(str(data[cert_name]), validate=True)
            except binascii.Error:
                raise BadInput(f"{where}: its data is not base64") from None
            return load(key, cert, f"{where} ({key_name}, {cert_name})")
    have = ", ".join(sorted(data)) or "none"
    raise BadInput(f"{where}: holds no signing key: expected data keys key and cert (as KMM keeps them) or "
                   f"tls.key and tls.crt (have: {have})")
