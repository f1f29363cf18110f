"""Driver images, and what builds share, signed as cosign signs them, with their SBOM and provenance attested
(gpualign.model.cosign for the format; gpualign.judging.signature_check verifies). The key is named as cosign names
it (gpualign.ensure.cosign_keys: cosign's encrypted key file with $COSIGN_PASSWORD, an unencrypted PEM, a
k8s://NAMESPACE/SECRET, a KMS or Vault reference), in --cosign-key or $GPUALIGN_COSIGN_KEY. Keyless signing needs the
internet and is not offered.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base.errors import BadInput
from gpualign.ensure.cosign_keys import Signer, load_signer
from gpualign.model import attestations, cosign

if TYPE_CHECKING:
    from gpualign.ledger.registry import RegistryClient

def load_private_key(path: Path) -> Signer:
    """The signer of a key file (cosign's encrypted format, with $COSIGN_PASSWORD, or an unencrypted PEM)."""
    return load_signer(str(path))


def sign(client: RegistryClient, tag: str, key: Signer, repo: str | None = None) -> str:
    """Sign the image under `tag` by its digest, beside any signature it has: the signature tag's name."""
    repo = repo or client.ref.repo
    digest = client.digest(tag, repo)
    if digest is None:
        raise BadInput(f"{client.ref.host}/{repo}:{tag} is not in the registry: nothing to sign")
    where = cosign.signature_tag(digest)
    data = cosign.payload(f"{client.ref.host}/{repo}", digest)
    signature = base64.b64encode(key.sign(data)).decode()
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


def attest(client: RegistryClient, tag: str, key: Signer, evidence: Any,
           repo: str | None = None) -> tuple[str, str]:
    """The driver image's SBOM and provenance, signed as in-toto attestations (`sha256-<hex>.att`, what `cosign
    verify-attestation` reads), and the SBOM attached as is (`sha256-<hex>.sbom`, what `cosign download sbom`
    reads): the two tags."""
    def statements(name: str, digest: str, created: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        sbom = attestations.spdx(name, digest, evidence, created)
        return sbom, [(cosign.SPDX, sbom), (cosign.SLSA_PROVENANCE, attestations.provenance(evidence))]

    return attach(client, tag, key, statements, repo)


Statements = Callable[[str, str, str], "tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]"]


def attach(client: RegistryClient, tag: str, key: Signer, statements: Statements,
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
        signature = base64.b64encode(key.sign(cosign.pae(cosign.IN_TOTO, body)))
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


def sign_shared(client: RegistryClient, reference: str, repo: str, key: Signer | None) -> str | None:
    """Sign what a build shares (modules, a user space) with the run's key, when it has one."""
    return sign(client, reference, key, repo) if key is not None else None
