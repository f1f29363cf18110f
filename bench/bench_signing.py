"""Benchmark: what signing a driver image costs, beside its build: the signature (cosign's format), and the SBOM
and provenance attestations with the attached SBOM, for an image of five modules, on a registry of its own on
127.0.0.1. Seconds per image (medians) and the bytes each adds to the registry.

    .venv/bin/python bench/bench_signing.py --repeat 20
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from gpualign.ensure import signatures
from gpualign.judging import signature_check  # noqa: E402
from gpualign.lab import docker_registry, processes  # noqa: E402
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient  # noqa: E402
from gpualign.model.attestations import Evidence  # noqa: E402


def sizes(client: RegistryClient, tag: str) -> int:
    """Bytes of a signature/attestation manifest and the blobs it names."""
    manifest = client.manifest(tag)
    assert manifest is not None
    return len(json.dumps(manifest)) + manifest["config"]["size"] + sum(d["size"] for d in manifest["layers"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "signing.json")
    args = ap.parse_args()
    key = ec.generate_private_key(ec.SECP256R1())
    modules = tuple((f"nvidia{s}.ko", hashlib.sha256(s.encode()).hexdigest())
                    for s in ("", "-modeset", "-drm", "-uvm", "-peermem"))
    with tempfile.TemporaryDirectory(prefix="gpualign-bench-sign-") as tmp:
        proc = docker_registry.start(Path(tmp) / "registry")
        client = RegistryClient(RegistryRef(host=proc.address, repo="nvidia/driver", scheme="http"), timeout=30.0)
        sign_s, attest_s, verify_s = [], [], []
        try:
            for i in range(args.repeat):
                tag = f"535-6.1.0-{50 + i}-amd64-debian12"
                client.push_image(tag, {"KERNEL": f"6.1.0-{50 + i}-amd64"})
                evidence = Evidence(tag, f"6.1.0-{50 + i}-amd64", "535", "535.309.01", "nvidia-kernel-source",
                                    "compiled", modules, ("libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1",
                                                          "libnvidia-cfg1", "nvidia-smi"), "0.1.0", 773)
                t0 = time.perf_counter()
                sig = signatures.sign(client, tag, key)
                sign_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                att, sbom = signatures.attest(client, tag, key, evidence)
                attest_s.append(time.perf_counter() - t0)
                digest = client.digest(tag)
                assert digest is not None
                trusted = (signature_check.TrustedKey("bench", key.public_key()),)
                t0 = time.perf_counter()
                assert signature_check.verify(client, digest, trusted).ok
                verify_s.append(time.perf_counter() - t0)
            result = {"repeat": args.repeat, "sign_s": round(statistics.median(sign_s), 4),
                      "attest_s": round(statistics.median(attest_s), 4),
                      "verify_s": round(statistics.median(verify_s), 4),
                      "signature_bytes": sizes(client, sig), "attestation_bytes": sizes(client, att),
                      "sbom_bytes": sizes(client, sbom)}
        finally:
            client.close()
            processes.stop(proc)
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
