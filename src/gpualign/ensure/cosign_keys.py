"""The team's signing key, named as cosign names it (`--key` / $GPUALIGN_COSIGN_KEY):

- a file: cosign's own encrypted key (`cosign generate-key-pair` writes `ENCRYPTED SIGSTORE PRIVATE KEY`, cosign 1.x
  `ENCRYPTED COSIGN PRIVATE KEY`), its password from $COSIGN_PASSWORD as cosign reads it; or an unencrypted PEM ECDSA
  P-256 key (PKCS#8 or SEC1);
- `k8s://NAMESPACE/SECRET`: the Secret `cosign generate-key-pair k8s://…` writes (`cosign.key`, `cosign.password`),
  read through the cluster's API;
- a KMS or Vault reference (`awskms://`, `gcpkms://`, `azurekms://`, `hashivault://`, `pkcs11:`): signed by cosign
  itself (`cosign sign-blob`), which must be on PATH; the key never leaves the KMS.

Every signer answers one question, an ECDSA signature (DER) over SHA-256 of some bytes: what gpualign.model.cosign's
formats need, so the signatures and attestations are laid out in one place whatever holds the key.

cosign's encrypted file is go-securesystemslib's envelope: scrypt (N, r, p and the salt in the envelope) derives a
32-byte key that opens a NaCl secretbox holding the key's PKCS#8 DER. Opened here with hashlib's scrypt and PyNaCl
(libsodium's secretbox), the same primitives; no library reads cosign's envelope itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpualign.base.errors import BadInput, GpualignError

PASSWORD_ENV = "COSIGN_PASSWORD"  # cosign's own
KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "pkcs11:")
_ENCRYPTED = re.compile(rb"-----BEGIN (ENCRYPTED SIGSTORE PRIVATE KEY|ENCRYPTED COSIGN PRIVATE KEY)-----"
                        rb"(?P<body>.*?)-----END \1-----", re.S)


class Signer(Protocol):
    @property
    def name(self) -> str:
        """What the key is, for messages (a path, a reference): never the key."""
        ...

    def sign(self, data: bytes) -> bytes:
        """An ECDSA signature (ASN.1 DER) over SHA-256 of data."""
        ...


@dataclass(frozen=True)
class LocalKey:
    """A private key held in memory."""

    key: ec.EllipticCurvePrivateKey
    name: str

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))


@dataclass(frozen=True)
class CosignSigner:
    """A key cosign holds (a KMS, Vault or PKCS#11 reference): each signature is `cosign sign-blob`'s, offline
    (no transparency log)."""

    reference: str
    cosign: str = "cosign"

    @property
    def name(self) -> str:
        return self.reference

    def sign(self, data: bytes) -> bytes:
        with tempfile.NamedTemporaryFile(prefix="gpualign-payload-") as payload:
            payload.write(data)
            payload.flush()
            try:
                proc = subprocess.run([self.cosign, "sign-blob", "--key", self.reference, "--tlog-upload=false",
                                       "--yes", payload.name], capture_output=True, text=True, timeout=120)
            except FileNotFoundError:
                raise BadInput(f"{self.reference}: a KMS or Vault key is used through cosign, which is not on "
                               "PATH") from None
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            raise GpualignError(f"cosign sign-blob --key {self.reference}: {said}")
        lines = [line for line in proc.stdout.split() if line]
        try:
            return base64.b64decode(lines[-1], validate=True)
        except (IndexError, ValueError):
            raise GpualignError(f"cosign sign-blob --key {self.reference}: no signature in its output") from None


def load_signer(reference: str, *, password: bytes | None = None, kube: Any = None) -> Signer:
    """The signer a key reference names (a file, k8s://NAMESPACE/SECRET, or a KMS reference); BadInput in one line
    when it cannot be used."""
    if reference.startswith(KMS_SCHEMES):
        if shutil.which("cosign") is None:
            raise BadInput(f"{reference}: a KMS or Vault key is used through cosign itself, which is not on PATH "
                           "(gpualign lab build --only cosign builds it from its Go module)")
        return CosignSigner(reference)
    if reference.startswith("k8s://"):
        return _from_secret(reference, kube)
    path = Path(reference)
    try:
        pem = path.read_bytes()
    except OSError as err:
        raise BadInput(f"{path}: cannot read the signing key: {err.strerror}") from None
    beside = path.parent / "cosign.password"  # cosign's Secret, mounted whole: cosign.key beside cosign.password
    if password is None and _password_given() is None and beside.is_file():
        password = beside.read_bytes()
    return LocalKey(private_key(pem, str(path), password), str(path))


def _password_given() -> str | None:
    """$COSIGN_PASSWORD as cosign reads it (None: not set; "" is a password): the one place it is read."""
    return os.environ.get(PASSWORD_ENV)


def private_key(pem: bytes, where: str, password: bytes | None = None) -> ec.EllipticCurvePrivateKey:
    """The ECDSA key in a PEM: cosign's encrypted envelope (opened with `password`, else $COSIGN_PASSWORD) or an
    unencrypted PKCS#8 or SEC1 key."""
    match = _ENCRYPTED.search(pem)
    if match is not None:
        if password is None:
            given = _password_given()
            if given is None:
                raise BadInput(f"{where}: cosign's encrypted key needs its password in ${PASSWORD_ENV} (or a "
                               "cosign.password file beside it, as cosign's Secret holds it)")
            password = given.encode()
        der = decrypt(base64.b64decode(b"".join(match.group("body").split())), password, where)
        key = serialization.load_der_private_key(der, password=None)
    else:
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as err:
            raise BadInput(f"{where}: not a private key cosign or gpualign can read ({err}); make one with "
                           "`cosign generate-key-pair`") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise BadInput(f"{where}: not an ECDSA P-256 key: gpualign signs as cosign's default keys do")
    return key


def decrypt(envelope: bytes, password: bytes, where: str) -> bytes:
    """The plaintext of go-securesystemslib's encrypted envelope (scrypt, then a NaCl secretbox)."""
    import nacl.exceptions
    import nacl.secret

    try:
        doc = json.loads(envelope)
        kdf, cipher = doc["kdf"], doc["cipher"]
        if kdf["name"] != "scrypt" or cipher["name"] != "nacl/secretbox":
            raise BadInput(f"{where}: an encrypted key of {kdf['name']}/{cipher['name']}: cosign writes "
                           "scrypt/nacl-secretbox")
        params = kdf["params"]
        n, r, p = int(params["N"]), int(params["r"]), int(params["p"])
        salt, nonce = base64.b64decode(kdf["salt"]), base64.b64decode(cipher["nonce"])
        ciphertext = base64.b64decode(doc["ciphertext"])
    except (ValueError, KeyError, TypeError) as err:
        raise BadInput(f"{where}: not cosign's encrypted key envelope ({err})") from None
    secret = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=32, maxmem=256 * 1024 * 1024)
    try:
        return bytes(nacl.secret.SecretBox(secret).decrypt(ciphertext, nonce))
    except nacl.exceptions.CryptoError:
        raise BadInput(f"{where}: the password (${PASSWORD_ENV}) does not open this key") from None


def _from_secret(reference: str, kube: Any) -> Signer:
    """k8s://NAMESPACE/SECRET: the Secret cosign writes (cosign.key, and cosign.password when it is encrypted)."""
    namespace, _, name = reference.removeprefix("k8s://").partition("/")
    if not namespace or not name or "/" in name:
        raise BadInput(f"{reference}: expected k8s://NAMESPACE/SECRET")
    if kube is None:
        from gpualign.kube.client import Kube

        with Kube(timeout=30.0) as own:
            return _from_secret(reference, own)
    secret = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if secret is None:
        raise BadInput(f"{reference}: no such Secret")
    data = secret.get("data") or {}
    if "cosign.key" not in data:
        raise BadInput(f"{reference}: the Secret has no cosign.key (cosign generate-key-pair {reference} writes it)")
    pem = base64.b64decode(data["cosign.key"])
    password = base64.b64decode(data["cosign.password"]) if "cosign.password" in data else None
    return LocalKey(private_key(pem, reference, password), reference)
