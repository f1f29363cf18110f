"""Image signatures in the format cosign writes and `cosign verify --key` reads. Pure: bytes and manifests, no I/O.

cosign signs an image's manifest digest, not its tag: the signed payload is a "simple signing" document naming the
repository and the digest, and the signature (ECDSA over the payload's SHA-256, DER, base64) rides as an annotation
on a layer of that payload, in an OCI manifest pushed beside the image under the tag `sha256-<hex>.sig`. Several
signatures of one image are several layers of that manifest (sigstore/cosign: pkg/cosign/payload, pkg/oci/static,
pkg/oci/remote's signature tag). An image re-pushed under the same tag has another digest, and so no signature.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


def signature_tag(digest: str) -> str:
    """Where an image's signatures are: `sha256-<hex>.sig` beside it, in its repository."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return f"sha256-{hexdigest}.sig"


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


def signature_manifest(signatures: list[tuple[bytes, str]]) -> tuple[dict[str, Any], bytes]:
    """The manifest (and its config) holding each (payload, base64 signature) as a layer."""
    config = config_for([p for p, _ in signatures])
    return ({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _descriptor(OCI_CONFIG, config),
             "layers": [_descriptor(SIMPLE_SIGNING, p, {SIGNATURE_ANNOTATION: s}) for p, s in signatures]}, config)


def signature_layers(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(payload digest, base64 signature) of each simple-signing layer of a signature manifest."""
    out = []
    for layer in manifest.get("layers") or []:
        if isinstance(layer, dict) and layer.get("mediaType") == SIMPLE_SIGNING:
            signature = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
            if isinstance(signature, str) and isinstance(layer.get("digest"), str):
                out.append((layer["digest"], signature))
    return out
