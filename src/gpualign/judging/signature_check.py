"""Whether a trusted key signed an image, as cosign verifies it (gpualign.model.cosign for the format): read
before a present image is called present, and before a build takes what another build shared. The keys to trust are
PEM ECDSA P-256 public keys (what `cosign public-key` prints, or `openssl ec -in key.pem -pubout`), named by
--trusted-key or $GPUALIGN_TRUSTED_KEYS and loaded by the command line (load_trusted), which hands them on.
gpualign.ensure.signatures signs."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpualign.base.errors import BadInput
from gpualign.model import cosign

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

    from gpualign.ledger.registry import RegistryClient



@dataclass(frozen=True)
class TrustedKey:
    path: str
    key: ec.EllipticCurvePublicKey

    @property
    def name(self) -> str:
        return Path(self.path).name


_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def load_trusted(paths: Iterable[str]) -> tuple[TrustedKey, ...]:
    """The public keys in each PEM file (one or several, as a bundle), each named by its file (and place)."""
    paths = list(paths)
    if not paths:
        return ()
    from cryptography.hazmat.primitives import serialization  # only where keys are named (cryptography: ~20 ms)
    from cryptography.hazmat.primitives.asymmetric import ec

    out = []
    for path in paths:
        try:
            text = Path(path).read_bytes()
        except OSError as err:
            raise BadInput(f"{path}: cannot read the trusted key: {err.strerror}") from None
        blocks = _PEM.findall(text) or [text]
        for i, block in enumerate(blocks):
            try:
                key = serialization.load_pem_public_key(block)
            except ValueError as err:
                raise BadInput(f"{path}: not a PEM public key ({err})") from None
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise BadInput(f"{path}: not an ECDSA public key: cosign signs with ECDSA P-256")
            out.append(TrustedKey(path if len(blocks) == 1 else f"{path}#{i + 1}", key))
    return tuple(out)


@dataclass(frozen=True)
class Verdict:
    signed_by: str | None  # the trusted key's name, when one signed this digest
    why: str | None  # why not, in one line

    @property
    def ok(self) -> bool:
        return self.signed_by is not None


def verify(client: RegistryClient, digest: str, trusted: Sequence[TrustedKey], repo: str | None = None) -> Verdict:
    """Whether a trusted key signed the image `digest`: a signature layer whose payload names this digest and
    verifies with the key."""
    from cryptography.exceptions import InvalidSignature  # only where keys are named (cryptography: ~20 ms)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    repo = repo or client.ref.repo
    manifest = client.manifest(cosign.signature_tag(digest), repo)
    if manifest is None:
        return Verdict(None, f"no signature ({cosign.signature_tag(digest)} is not in the registry)")
    seen: list[str] = []
    for layer_digest, signature in cosign.signature_layers(manifest):
        data = client.blob(layer_digest, repo)
        if "sha256:" + hashlib.sha256(data).hexdigest() != layer_digest:
            seen.append("a signature payload whose bytes are not its digest")
            continue
        try:
            signed = cosign.read_payload(data)
        except ValueError as err:
            seen.append(str(err))
            continue
        if signed.digest != digest:
            seen.append(f"a signature of another image ({signed.digest[:19]}…)")
            continue
        try:
            raw = base64.b64decode(signature, validate=True)
        except ValueError:
            seen.append("a signature that is not base64")
            continue
        for key in trusted:
            try:
                key.key.verify(raw, data, ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                continue
            return Verdict(key.name, None)
        seen.append("a signature by a key not trusted here")
    return Verdict(None, "; ".join(dict.fromkeys(seen)) or "no signature layer")


def unsigned_digest(client: RegistryClient, digest: str, repo: str, trusted: Sequence[TrustedKey]) -> str | None:
    """Why the artifact `repo@digest` may not be taken (not signed by one of the `trusted` keys); None when it is, or
    when no key is trusted. By digest: read the artifact by the same digest afterwards (RegistryClient.manifest_at)."""
    if not trusted:
        return None
    verdict = verify(client, digest, trusted, repo)
    return None if verdict.ok else f"not signed by a trusted key ({verdict.why})"
