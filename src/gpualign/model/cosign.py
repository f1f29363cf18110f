"""Image signatures and attestations in the formats cosign writes and `cosign verify --key`, `cosign
verify-attestation` and `cosign download sbom` read. Pure: bytes and manifests, no I/O.

cosign signs an image's manifest digest, not its tag: the signed payload is a "simple signing" document naming the
repository and the digest, and the signature (ECDSA over the payload's SHA-256, DER, base64) rides as an annotation
on a layer of that payload, in an OCI manifest pushed beside the image under the tag `sha256-<hex>.sig`. Several
signatures of one image are several layers of that manifest (sigstore/cosign: pkg/cosign/payload, pkg/oci/static,
pkg/oci/remote's signature tag). An image re-pushed under the same tag has another digest, and so no signature.

An attestation is an in-toto Statement about the image's digest (an SBOM: predicate type `https://spdx.dev/Document`;
provenance: `https://slsa.dev/provenance/v1`), wrapped in a DSSE envelope whose signature is over the envelope's
pre-authentication encoding, and pushed as a layer of `sha256-<hex>.att`. An SBOM is also attached as is, under
`sha256-<hex>.sbom`, where `cosign download sbom` reads it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gpualign.model import oci

KEY_ENV = "GPUALIGN_COSIGN_KEY"  # the private key ensure and build Jobs sign with
TRUSTED_ENV = "GPUALIGN_TRUSTED_KEYS"  # the public keys an image must be signed by, ':'-separated paths
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
OCI_MANIFEST, OCI_CONFIG = oci.OCI_MANIFEST, oci.OCI_CONFIG
DSSE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
STATEMENT = "https://in-toto.io/Statement/v0.1"
SPDX = "https://spdx.dev/Document"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
SPDX_JSON = "text/spdx+json"


def signature_tag(digest: str, suffix: str = "sig") -> str:
    """Where an image's signatures are: `sha256-<hex>.sig` beside it, in its repository (`.att` its attestations,
    `.sbom` its attached SBOM)."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return f"sha256-{hexdigest}.{suffix}"


def attached_to(tag: str) -> str | None:
    """The digest a `sha256-<hex>.sig|.att|.sbom` tag is attached to, or None for a tag of another shape."""
    stem, dot, suffix = tag.rpartition(".")
    hexdigest = stem.removeprefix("sha256-")
    if not dot or suffix not in ("sig", "att", "sbom") or not stem.startswith("sha256-") or len(hexdigest) != 64 \
            or any(c not in "0123456789abcdef" for c in hexdigest):
        return None
    return f"sha256:{hexdigest}"


def payload(repository: str, digest: str) -> bytes:
    """The simple-signing document for the image `digest` in `repository` (HOST/PATH), as cosign marshals it."""
    return json.dumps({"critical": {"identity": {"docker-reference": repository},
                                    "image": {"docker-manifest-digest": digest}, "type": SIGNATURE_TYPE},
                       "optional": None}, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Signed:
    """What a payload says was signed."""

    repository: str
    digest: str


def read_payload(data: bytes) -> Signed:
    """A simple-signing payload taken apart; ValueError for anything else."""
    try:
        doc = json.loads(data)
        critical = doc["critical"]
        if critical["type"] != SIGNATURE_TYPE:
            raise ValueError(f"a payload of type {critical['type']!r}")
        return Signed(str(critical["identity"]["docker-reference"]), str(critical["image"]["docker-manifest-digest"]))
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a simple-signing payload ({err})") from None


def _descriptor(media_type: str, data: bytes, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": media_type, "size": len(data),
                           "digest": "sha256:" + hashlib.sha256(data).hexdigest()}
    if annotations:
        out["annotations"] = annotations
    return out


def config_for(layers: list[bytes]) -> bytes:
    """The image config of a signature manifest: the payloads as its layers' diff_ids, as cosign writes it."""
    return json.dumps({"architecture": "", "created": "0001-01-01T00:00:00Z",
                       "history": [{"created": "0001-01-01T00:00:00Z"} for _ in layers], "os": "",
                       "rootfs": {"type": "layers",
                                  "diff_ids": ["sha256:" + hashlib.sha256(p).hexdigest() for p in layers]},
                       "config": {}}, separators=(",", ":")).encode()


def artifact_manifest(layers: list[tuple[bytes, str, dict[str, str]]]) -> tuple[dict[str, Any], bytes]:
    """The manifest (and its config) holding each (bytes, media type, annotations) as a layer."""
    config = config_for([data for data, _, _ in layers])
    return ({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _descriptor(OCI_CONFIG, config),
             "layers": [_descriptor(media, data, notes) for data, media, notes in layers]}, config)


def signature_manifest(signatures: list[tuple[bytes, str]]) -> tuple[dict[str, Any], bytes]:
    """The manifest (and its config) holding each (payload, base64 signature) as a layer."""
    return artifact_manifest([(p, SIMPLE_SIGNING, {SIGNATURE_ANNOTATION: s}) for p, s in signatures])


def statement(repository: str, digest: str, predicate_type: str, predicate: dict[str, Any]) -> bytes:
    """An in-toto Statement about the image `digest` in `repository`."""
    return json.dumps({"_type": STATEMENT, "predicateType": predicate_type,
                       "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
                       "predicate": predicate}, separators=(",", ":")).encode()


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what an envelope's signature is over."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(body), body)


def envelope(body: bytes, signature_b64: str) -> bytes:
    """A DSSE envelope of an in-toto statement and its signature."""
    import base64

    return json.dumps({"payloadType": IN_TOTO, "payload": base64.b64encode(body).decode(),
                       "signatures": [{"keyid": "", "sig": signature_b64}]}, separators=(",", ":")).encode()


def read_envelope(data: bytes) -> tuple[bytes, list[str]]:
    """(the statement, its base64 signatures) of a DSSE envelope; ValueError for anything else."""
    import base64

    try:
        doc = json.loads(data)
        if doc["payloadType"] != IN_TOTO:
            raise ValueError(f"an envelope of {doc['payloadType']!r}")
        return base64.b64decode(doc["payload"], validate=True), [str(s["sig"]) for s in doc["signatures"]]
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a DSSE envelope ({err})") from None


def signature_layers(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(payload digest, base64 signature) of each simple-signing layer of a signature manifest."""
    out = []
    for layer in manifest.get("layers") or []:
        if isinstance(layer, dict) and layer.get("mediaType") == SIMPLE_SIGNING:
            signature = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
            if isinstance(signature, str) and isinstance(layer.get("digest"), str):
                out.append((layer["digest"], signature))
    return out
