"""A signature policy admits the driver images gpualign signs, judged by sigstore's policy-controller itself: its
policy-tester (v0.13.1, built here from its Go module) runs the admission webhook's own verification against a
registry of its own. The ClusterImagePolicy is the one docs/security.md gives, read from it, so the docs cannot
drift from what is proven. Offline: the policy names a key and no transparency log."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpualign.ensure import signatures
from gpualign.lab import versions
from gpualign.model.attestations import Evidence
from tests.support.cosign_keys import key_pair, lab_tool

pytestmark = pytest.mark.lab

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
MARK = "<!-- policy-controller: the test below reads this block -->"


def docs_policy(registry: str, public_key: Path, *, attestations: bool = True) -> str:
    """docs/security.md's ClusterImagePolicy (the indented block after MARK), for this registry and key."""
    lines = DOCS.read_text().split(MARK, 1)[1].lstrip("\n").splitlines()
    end = next(i for i, line in enumerate(lines) if line and not line.startswith("    "))
    block = [line[4:] for line in lines[:end]]
    yaml = YAML()
    policy = yaml.load("\n".join(block).replace("REGISTRY", registry))
    assert policy["kind"] == "ClusterImagePolicy"
    (authority,) = policy["spec"]["authorities"]
    assert "the contents of cosign.pub" in authority["key"]["data"]
    authority["key"]["data"] = public_key.read_text()
    if not attestations:
        del authority["attestations"]
    out = io.StringIO()
    yaml.dump(policy, out)
    return out.getvalue()


@pytest.fixture(scope="module")
def tester() -> Path:
    return lab_tool(versions.policy_tester_binary())


def admitted(tester: Path, policy: str, image: str, tmp_path: Path) -> tuple[bool, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    proc = subprocess.run([str(tester), "--policy", str(path), "--image", image], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    return proc.returncode == 0, proc.stdout + proc.stderr


def evidence(tag: str, kernel: str) -> Evidence:
    return Evidence(tag, kernel, "535", "535.309.01", "nvidia-kernel-source", "compiled",
                    (("nvidia.ko", "ab" * 32), ("nvidia-uvm.ko", "cd" * 32)), ("libcuda1", "nvidia-smi"),
                    "0.1.0", 773, "2026-12-05T07:00:00Z", "2026-12-05T07:02:00Z")


def test_the_docs_policy_admits_only_what_gpualign_signed_and_attested(tester, registry, tmp_path):
    ours_key, ours_pub = key_pair(tmp_path, "ours")
    other_key, _ = key_pair(tmp_path, "other")
    ours, other = signatures.load_private_key(ours_key), signatures.load_private_key(other_key)
    host = registry.ref.host
    full = docs_policy(host, ours_pub)
    signed_only = docs_policy(host, ours_pub, attestations=False)

    built = "535-6.1.0-50-amd64-debian12"  # built by gpualign: signed, with its SBOM and provenance
    registry.push_image(built, {"KERNEL": "6.1.0-50-amd64"})
    ok, log = admitted(tester, signed_only, f"{host}/nvidia/driver:{built}", tmp_path)
    assert not ok and "no signatures found" in log, log  # nothing signed yet
    ok, log = admitted(tester, full, f"{host}/nvidia/driver:{built}", tmp_path)
    assert not ok and "no matching attestations" in log, log  # (a policy with attestations checks those alone)
    signatures.sign(registry, built, ours)
    ok, log = admitted(tester, full, f"{host}/nvidia/driver:{built}", tmp_path)
    assert not ok and "no matching attestations" in log, log  # signed, but neither SBOM nor provenance
    ok, log = admitted(tester, signed_only, f"{host}/nvidia/driver:{built}", tmp_path)
    assert ok, log  # a mirrored image carries the signature alone: the policy without attestations admits it
    signatures.attest(registry, built, ours, evidence(built, "6.1.0-50-amd64"))
    ok, log = admitted(tester, full, f"{host}/nvidia/driver:{built}", tmp_path)
    assert ok, log
    ok, log = admitted(tester, full, f"{host}/nvidia/driver@{registry.digest(built)}", tmp_path)
    assert ok, log  # by its digest as well

    foreign = "535-6.1.0-57-amd64-debian12"  # signed and attested, but by a key the policy does not name
    registry.push_image(foreign, {"KERNEL": "6.1.0-57-amd64"})
    signatures.sign(registry, foreign, other)
    signatures.attest(registry, foreign, other, evidence(foreign, "6.1.0-57-amd64"))
    for policy, refusal in ((full, "no matching attestations"), (signed_only, "no matching signatures")):
        ok, log = admitted(tester, policy, f"{host}/nvidia/driver:{foreign}", tmp_path)
        assert not ok and refusal in log, log

    registry.push_image(built, {"KERNEL": "6.1.0-50-amd64", "REPUSHED": "1"})  # over the signed one
    for policy, refusal in ((full, "no matching attestations"), (signed_only, "no signatures found")):
        ok, log = admitted(tester, policy, f"{host}/nvidia/driver:{built}", tmp_path)
        assert not ok and refusal in log, log
