#!/usr/bin/env python3
"""Push gpualign's own image (or its builder image) from `make image`'s storage to a registry; with a key, sign it by
its digest as cosign signs, and attach its SBOM (the SPDX document `make image` wrote) as a signed attestation and
as is, where `cosign verify`, `cosign verify-attestation --type spdxjson` and `cosign download sbom` read them.

    .venv/bin/python scripts/publish_image.py registry.example.com/platform/gpualign:0.1.0 --key cosign.key
    .venv/bin/python scripts/publish_image.py registry.example.com/platform/gpualign-builder:0.1.0 --builder \\
        --key cosign.key
    make publish-image IMAGE_REF=registry.example.com/platform/gpualign:0.1.0 COSIGN_KEY=cosign.key

The key is the one driver images are signed with ($GPUALIGN_COSIGN_KEY's format: PEM ECDSA P-256, unencrypted).
Credentials: buildah's (`buildah login`, or --authfile / $REGISTRY_AUTH_FILE) for the push, and the same Docker
config for the signature (--docker-config). A registry on this machine's loopback is spoken to over plain http.
Prints the pushed image by digest, then the signature and SBOM tags.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from build_image import BUILDER_IMAGE, IMAGE, buildah, has_image, sbom_path, source_key  # noqa: E402

from gpualign.base.errors import GpualignError  # noqa: E402
from gpualign.ensure import signatures  # noqa: E402
from gpualign.ledger.references import LOOPBACK  # noqa: E402
from gpualign.ledger.registry import connect  # noqa: E402
from gpualign.model import cosign  # noqa: E402


def publish(ref: str, *, builder: bool, key_file: Path | None, docker_config: Path | None) -> list[str]:
    """Push, then sign and attest: what is printed, a line each."""
    image, kind = (BUILDER_IMAGE, "builder") if builder else (IMAGE, "image")
    if not has_image(image):
        raise SystemExit(f"publish_image: {image} is not built (make image)")
    sbom_file = sbom_path(kind, source_key())
    if key_file is not None and not sbom_file.exists():
        raise SystemExit(f"publish_image: {image}'s SBOM {sbom_file} is missing: run make image")
    key = signatures.load_private_key(key_file) if key_file is not None else None
    repository, _, tag = ref.rpartition(":")
    if not repository or "/" in tag:
        raise SystemExit(f"publish_image: {ref!r}: expected REGISTRY/REPOSITORY:TAG")
    host, _, repo = repository.partition("/")
    plain = host.rsplit(":", 1)[0] in LOOPBACK
    with tempfile.TemporaryDirectory(prefix="gpualign-publish-") as tmp:
        digest_file = Path(tmp) / "digest"
        buildah("push", "--quiet", f"--tls-verify={'false' if plain else 'true'}", "--digestfile", str(digest_file),
                image, f"docker://{ref}")
        digest = digest_file.read_text().strip()
    said = [f"{repository}@{digest}"]
    if key is None:
        return said + ["not signed: no --key"]
    client = connect(f"registry://{repository}", docker_config=docker_config, timeout=60.0)
    try:
        sbom: dict[str, Any] = json.loads(sbom_file.read_text())

        def statements(name: str, at: str, created: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
            doc = {**sbom, "name": f"{name}@{at}", "creationInfo": {**sbom["creationInfo"], "created": created}}
            return doc, [(cosign.SPDX, doc)]

        said.append(signatures.sign(client, digest, key, repo))
        said.extend(signatures.attach(client, digest, key, statements, repo))
    finally:
        client.close()
    return said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref", help="where to push: REGISTRY/REPOSITORY:TAG")
    ap.add_argument("--builder", action="store_true", help="the builder image (build Jobs run it), not gpualign's")
    ap.add_argument("--key", type=Path, help="sign with this key and attach the SBOM (without it: pushed unsigned)")
    ap.add_argument("--docker-config", type=Path, help="the Docker config whose credentials sign (default: "
                    "~/.docker/config.json, as gpualign reads it)")
    args = ap.parse_args()
    try:
        for line in publish(args.ref, builder=args.builder, key_file=args.key, docker_config=args.docker_config):
            print(line)
    except GpualignError as err:
        print(f"publish_image: {err.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
