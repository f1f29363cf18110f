"""Driver images signed as cosign signs them, and their signatures verified before an image is called present
(gpualign.model.cosign for the format). The key is a PEM ECDSA P-256 key: a private one to sign (PKCS#8 or SEC1,
unencrypted: `openssl ecparam -genkey -name prime256v1 -noout -out key.pem`), public ones to trust (what `cosign
public-key` prints, or `openssl ec -in key.pem -pubout`). Keyless signing needs the internet and is not offered.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpualign.base.errors import BadInput
from gpualign.model import attestations, cosign

if TYPE_CHECKING:
    from gpualign.ledger.registry import RegistryClient

KEY_ENV, TRUSTED_ENV = cosign.KEY_ENV, cosign.TRUSTED_ENV


@dataclass(frozen=True)
class TrustedKey:
    path: str
    key: ec.EllipticCurvePublicKey

    @property
    def name(self) -> str:
        return Path(self.path).name


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as err:
        raise BadInput(f"{path}: cannot read the signing key: {err.strerror}") from None
    except (ValueError, TypeError) as err:
        raise BadInput(f"{path}: not an unencrypted PEM private key ({err}); make one with `openssl ecparam "
                       "-genkey -name prime256v1 -noout -out key.pem`") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise BadInput(f"{path}: not an ECDSA key: cosign verifies ECDSA P-256 signatures")
    return key


_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def load_trusted(paths: Iterable[str]) -> tuple[TrustedKey, ...]:
    """The public keys in each PEM file (one or several, as a bundle), each named by its file (and place)."""
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


def sign(client: RegistryClient, tag: str, key: ec.EllipticCurvePrivateKey, repo: str | None = None) -> str:
    """Sign the image under `tag` by its digest, beside any signature it has: the signature tag's name."""
    repo = repo or client.ref.repo
    digest = client.digest(tag, repo)
    if digest is None:
        raise BadInput(f"{client.ref.host}/{repo}:{tag} is not in the registry: nothing to sign")
    where = cosign.signature_tag(digest)
    data = cosign.payload(f"{client.ref.host}/{repo}", digest)
    signature = base64.b64encode(key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()
    signatures: list[tuple[bytes, str]] = []
    existing = client.manifest(where, repo)
    if existing is not None:  # keep every signature it has; one of the same payload and key is replaced
        for layer_digest, other in cosign.signature_layers(existing):
            if layer_digest != "sha256:" + hashlib.sha256(data).hexdigest():
                signatures.append((client.blob(layer_digest, repo), other))
    signatures.append((data, signature))
    manifest, config = cosign.signature_manifest(signatures)
    for blob in {config, *(p for p, _ in signatures)}:
        client.push_blob(blob, repo)
    client.push_manifest(where, manifest, repo)
    return where


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


def configured_key() -> ec.EllipticCurvePrivateKey | None:
    """The key ensure signs what it pushes with ($GPUALIGN_COSIGN_KEY), or None: nothing is signed."""
    import os

    path = os.environ.get(KEY_ENV)
    return load_private_key(Path(path)) if path else None


def configured_trusted() -> tuple[TrustedKey, ...]:
    """The keys a present image must be signed by ($GPUALIGN_TRUSTED_KEYS, ':'-separated PEM files); none: signatures
    are not checked."""
    import os

    return _trusted_from(os.environ.get(TRUSTED_ENV) or "")


def _trusted_from(value: str) -> tuple[TrustedKey, ...]:
    return load_trusted([p for p in value.split(":") if p])


def attest(client: RegistryClient, tag: str, key: ec.EllipticCurvePrivateKey, evidence: Any,
           repo: str | None = None) -> tuple[str, str]:
    """The driver image's SBOM and provenance, signed as in-toto attestations (`sha256-<hex>.att`, what `cosign
    verify-attestation` reads), and the SBOM attached as is (`sha256-<hex>.sbom`, what `cosign download sbom`
    reads): the two tags."""
    def statements(name: str, digest: str, created: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        sbom = attestations.spdx(name, digest, evidence, created)
        return sbom, [(cosign.SPDX, sbom), (cosign.SLSA_PROVENANCE, attestations.provenance(evidence))]

    return attach(client, tag, key, statements, repo)


Statements = Callable[[str, str, str], "tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]"]


def attach(client: RegistryClient, tag: str, key: ec.EllipticCurvePrivateKey, statements: Statements,
           repo: str | None = None) -> tuple[str, str]:
    """Any image's SBOM and attestations: `statements(repository, digest, created)` gives the SBOM and the
    (predicate type, predicate) pairs to sign about the digest the tag names now. Pushed as `attest` says; the two
    tags."""
    import datetime as dt
    import json

    repo = repo or client.ref.repo
    digest = client.digest(tag, repo)
    if digest is None:
        raise BadInput(f"{client.ref.host}/{repo}:{tag} is not in the registry: nothing to attest")
    name = f"{client.ref.host}/{repo}"
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    sbom, predicates = statements(name, digest, created)
    layers: list[tuple[bytes, str, dict[str, str]]] = []
    for predicate_type, predicate in predicates:
        body = cosign.statement(name, digest, predicate_type, predicate)
        signature = base64.b64encode(key.sign(cosign.pae(cosign.IN_TOTO, body), ec.ECDSA(hashes.SHA256())))
        layers.append((cosign.envelope(body, signature.decode()), cosign.DSSE,
                       {cosign.SIGNATURE_ANNOTATION: "", "predicateType": predicate_type}))
    tags = []
    attached: list[tuple[bytes, str, dict[str, str]]] = [(json.dumps(sbom, indent=1).encode(), cosign.SPDX_JSON, {})]
    for suffix, content in (("att", layers), ("sbom", attached)):
        manifest, config = cosign.artifact_manifest(content)
        for blob in {config, *(data for data, _, _ in content)}:
            client.push_blob(blob, repo)
        where = cosign.signature_tag(digest, suffix)
        client.push_manifest(where, manifest, repo)
        tags.append(where)
    return tags[0], tags[1]


def unsigned(client: RegistryClient, reference: str, repo: str) -> str | None:
    """Why `repo:reference` (an artifact another build shared: modules, a user space) may not be taken: not signed
    by a key of $GPUALIGN_TRUSTED_KEYS; None when it is, or when no key is trusted here."""
    trusted = configured_trusted()
    if not trusted:
        return None
    digest = client.digest(reference, repo)
    if digest is None:
        return None
    return unsigned_digest(client, digest, repo)


def unsigned_digest(client: RegistryClient, digest: str, repo: str) -> str | None:
    """Why the artifact `repo@digest` may not be taken (not signed by a trusted key); None when it is, or when no
    key is trusted here. By digest: read the artifact by the same digest afterwards (RegistryClient.manifest_at)."""
    trusted = configured_trusted()
    if not trusted:
        return None
    verdict = verify(client, digest, trusted, repo)
    return None if verdict.ok else f"not signed by a trusted key ({verdict.why})"


def sign_shared(client: RegistryClient, reference: str, repo: str) -> str | None:
    """Sign what a build shares (modules, a user space) with $GPUALIGN_COSIGN_KEY, when one is set."""
    key = configured_key()
    return sign(client, reference, key, repo) if key is not None else None
