"""gpualign's driver image signatures against sigstore's cosign, built here from its Go module (v2.6.5), on a
registry of its own: `cosign verify --key` accepts what gpualign signs, and gpualign accepts what `cosign sign
--key` signs with the same key pair and refuses it under another key. Offline: no transparency log."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpualign.ensure import signatures
from gpualign.judging import signature_check
from gpualign.lab import versions
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from tests.support.cosign_keys import key_pair, lab_tool, own_registry

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def cosign() -> Path:
    return lab_tool(versions.cosign_binary())


def run(cosign: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cosign), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COSIGN_PASSWORD": "", "HOME": str(cwd)})


def test_cosign_verifies_what_gpualign_signs(cosign, registry, tmp_path):
    key_pair(tmp_path, "ours")
    tag = "535-6.1.0-50-amd64-debian12"
    registry.push_image(tag, {"KERNEL": "6.1.0-50-amd64"})
    digest = registry.digest(tag)
    image = f"{registry.ref.host}/nvidia/driver@{digest}"
    before = run(cosign, tmp_path, "verify", "--key", "ours.pub", "--insecure-ignore-tlog=true",
                 "--allow-http-registry", image)
    assert before.returncode != 0  # nothing signed yet: cosign refuses too
    signatures.sign(registry, tag, signatures.load_private_key(tmp_path / "ours.key"))
    after = run(cosign, tmp_path, "verify", "--key", "ours.pub", "--insecure-ignore-tlog=true",
                "--allow-http-registry", image)
    assert after.returncode == 0, after.stderr
    assert f'"docker-manifest-digest":"{digest}"' in after.stdout


def test_gpualign_accepts_what_cosign_signs_with_its_key_and_refuses_another(cosign, registry, tmp_path):
    made = run(cosign, tmp_path, "generate-key-pair")
    assert made.returncode == 0, made.stderr
    tag = "535-6.1.0-57-amd64-debian12"
    registry.push_image(tag, {"KERNEL": "6.1.0-57-amd64"})
    digest = registry.digest(tag)
    assert digest is not None
    signed = run(cosign, tmp_path, "sign", "--key", "cosign.key", "--tlog-upload=false", "--allow-http-registry",
                 "--yes", f"{registry.ref.host}/nvidia/driver@{digest}")
    assert signed.returncode == 0, signed.stderr
    assert signature_check.verify(registry, digest, signature_check.load_trusted([str(tmp_path / "cosign.pub")])).ok
    key_pair(tmp_path, "other")
    refused = signature_check.verify(registry, digest, signature_check.load_trusted([str(tmp_path / "other.pub")]))
    assert not refused.ok and "a key not trusted here" in refused.why


def test_with_a_trusted_key_an_unsigned_image_is_never_present_and_a_signed_one_is(tmp_path):
    """$GPUALIGN_TRUSTED_KEYS: check counts an image without a signature by that key over its digest as present but
    unsigned (exit 1; the walk's preflight and the gate judge images the same way), and the same image signed as
    present; an image re-pushed under the tag after signing is unsigned again. ensure with $GPUALIGN_COSIGN_KEY signs
    what it pushes."""
    from tests.support.cli import run_cli
    from tests.support.lab import start_lab

    key_pair(tmp_path, "ours")
    lab = start_lab(tmp_path / "state", "empty")
    try:
        kernel = "5.15.0-124-generic"
        tag = f"580-{kernel}-ubuntu22.04"
        assert lab.cli("lab", "add-node", "signed-1", "--kernel", kernel).code == 0
        assert lab.cli("lab", "push-image", tag).code == 0
        ledger = f"registry://{lab.registry}/nvidia/driver"
        trusted = {**lab.env, "GPUALIGN_TRUSTED_KEYS": str(tmp_path / "ours.pub")}

        def check() -> tuple[int, dict]:
            res = run_cli("check", "--ledger", ledger, "--driver-branch", "580", "-o", "json", env=trusted)
            return res.code, json.loads(res.out)

        code, data = check()
        (node,) = data["nodes"]
        assert code == 1 and node["status"] == "wrong-image" and "unsigned: no signature by a trusted key" in \
            node["reason"], node
        plain = run_cli("check", "--ledger", ledger, "--driver-branch", "580", "-o", "json", env=lab.env)
        assert json.loads(plain.out)["nodes"][0]["status"] == "present"  # no trusted key: signatures not checked
        # plan judges the same image by the same keys, handed on by its command line as check's are
        planned = run_cli("plan", "--ledger", ledger, "--driver-branch", "580", "-o", "json", env=trusted)
        (needed,) = json.loads(planned.out)["needed"]
        assert "unsigned: no signature by a trusted key" in (needed["wrong"] or "") and not needed["in_ledger"] \
            and tag in json.loads(planned.out)["to_build"], needed
        # status --tonight and why --tonight hold the node on that image by the same keys; without them it may go
        selector = "kubernetes.io/hostname=signed-1"
        told = run_cli("status", "-l", selector, "--tonight", "--ledger", ledger, "-o", "json", env=trusted)
        (verdict,) = json.loads(told.out)["reboot"]
        assert told.code == 1 and (verdict["hold"], verdict["tag"]) == ("unsigned", tag), verdict
        why = run_cli("why", "signed-1", "--tonight", "--ledger", ledger, env=trusted)
        assert why.code == 1 and "held (unsigned)" in why.out, why.out
        told = run_cli("status", "-l", selector, "--tonight", "--ledger", ledger, "-o", "json", env=lab.env)
        assert told.code == 0 and json.loads(told.out)["reboot"][0]["ready"], told.out
        client = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"))
        try:
            signatures.sign(client, tag, signatures.load_private_key(tmp_path / "ours.key"))
            code, data = check()
            assert data["nodes"][0]["status"] == "present", data["nodes"][0]
            client.push_image(tag, {"DRIVER_VERSION": "580.173.02", "REPUSHED": "1"})  # over the signed one
        finally:
            client.close()
        code, data = check()
        assert code == 1 and "unsigned" in data["nodes"][0]["reason"]
        # ensure signs what it pushes: a mirror from a registry of its own, signed by digest
        other = "580-5.15.0-125-generic-ubuntu22.04"
        with own_registry(tmp_path / "upstream") as up:
            # an image NVIDIA's pipeline labels `version=<branch>-<kernel>`: judged by its labels, then mirrored
            up.push_image(other, {"DRIVER_VERSION": "580.173.02"}, labels={"version": "580-5.15.0-125-generic"})
            made = run_cli("ensure", other, "--ledger", ledger, "--upstream", f"registry://{up.ref.host}/nvidia/driver",
                           "-o", "json", env={**trusted, "GPUALIGN_COSIGN_KEY": str(tmp_path / "ours.key")},
                           timeout=300)
        assert made.code == 0, made.err
        (row,) = json.loads(made.out)["images"]
        assert row["signature"] and row["signature"].endswith(".sig"), row
        client = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"))
        try:
            digest = client.digest(other)
            trust = signature_check.load_trusted([str(tmp_path / "ours.pub")])
            assert digest and signature_check.verify(client, digest, trust).ok
        finally:
            client.close()
    finally:
        run_cli("lab", "down", env=lab.env)


def test_cosign_verifies_the_sbom_and_provenance_gpualign_attests_and_downloads_the_sbom(cosign, registry, tmp_path):
    from gpualign.model.attestations import Evidence

    private, _ = key_pair(tmp_path, "ours")
    key = signatures.load_private_key(private)
    tag = "535-6.1.0-50-amd64-debian12"
    registry.push_image(tag, {"KERNEL": "6.1.0-50-amd64"})
    digest = registry.digest(tag)
    evidence = Evidence(tag, "6.1.0-50-amd64", "535", "535.309.01", "nvidia-kernel-source", "compiled",
                        (("nvidia.ko", "ab" * 32), ("nvidia-uvm.ko", "cd" * 32)), ("libcuda1", "nvidia-smi"),
                        "0.1.0", 773, "2026-12-05T07:00:00Z", "2026-12-05T07:02:00Z")
    att, sbom = signatures.attest(registry, tag, key, evidence)
    hexdigest = digest.removeprefix("sha256:")
    assert (att, sbom) == (f"sha256-{hexdigest}.att", f"sha256-{hexdigest}.sbom")
    image = f"{registry.ref.host}/nvidia/driver@{digest}"
    for kind in ("spdxjson", "slsaprovenance1"):
        verified = run(cosign, tmp_path, "verify-attestation", "--key", "ours.pub", "--type", kind,
                       "--insecure-ignore-tlog=true", "--allow-http-registry", image)
        assert verified.returncode == 0, (kind, verified.stderr)
    downloaded = run(cosign, tmp_path, "download", "sbom", "--allow-http-registry", image)
    assert downloaded.returncode == 0, downloaded.stderr
    document = json.loads(downloaded.stdout)
    assert document["spdxVersion"] == "SPDX-2.3" and {f["checksums"][0]["checksumValue"] for f in document["files"]} \
        == {"ab" * 32, "cd" * 32}
    key_pair(tmp_path, "other")
    refused = run(cosign, tmp_path, "verify-attestation", "--key", "other.pub", "--type", "spdxjson",
                  "--insecure-ignore-tlog=true", "--allow-http-registry", image)
    assert refused.returncode != 0  # another key's: cosign refuses


def _cosign_with_password(cosign: Path, cwd: Path, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cosign), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COSIGN_PASSWORD": password, "HOME": str(cwd)})


def test_the_teams_own_encrypted_cosign_key_signs_and_cosign_verifies_it(cosign, registry, tmp_path, monkeypatch):
    """Review 6's H4: a key from `cosign generate-key-pair` (encrypted, its password in $COSIGN_PASSWORD) signs
    what gpualign pushes, and cosign verifies it with the key's public half; a wrong password is one line."""
    from gpualign.base.errors import BadInput
    from gpualign.ensure import cosign_keys

    made = _cosign_with_password(cosign, tmp_path, "team-secret", "generate-key-pair",
                                 "--output-key-prefix", "team")
    assert made.returncode == 0, made.stderr
    assert b"ENCRYPTED SIGSTORE PRIVATE KEY" in (tmp_path / "team.key").read_bytes()
    tag = "535-6.1.0-50-amd64-debian12"
    registry.push_image(tag, {"KERNEL": "6.1.0-50-amd64"})
    digest = registry.digest(tag)
    monkeypatch.setenv("COSIGN_PASSWORD", "wrong")
    with pytest.raises(BadInput, match="does not open this key"):
        cosign_keys.load_signer(str(tmp_path / "team.key"))
    monkeypatch.setenv("COSIGN_PASSWORD", "team-secret")
    signatures.sign(registry, tag, cosign_keys.load_signer(str(tmp_path / "team.key")))
    verified = run(cosign, tmp_path, "verify", "--key", "team.pub", "--insecure-ignore-tlog=true",
                   "--allow-http-registry", f"{registry.ref.host}/nvidia/driver@{digest}")
    assert verified.returncode == 0, verified.stderr
    # the same key through cosign itself (the path a KMS or Vault reference takes: `cosign sign-blob`)
    other = "535-6.1.0-57-amd64-debian12"
    registry.push_image(other, {"KERNEL": "6.1.0-57-amd64"})
    through = cosign_keys.CosignSigner(str(tmp_path / "team.key"), cosign=str(cosign))
    signatures.sign(registry, other, through)
    verified = run(cosign, tmp_path, "verify", "--key", "team.pub", "--insecure-ignore-tlog=true",
                   "--allow-http-registry", f"{registry.ref.host}/nvidia/driver@{registry.digest(other)}")
    assert verified.returncode == 0, verified.stderr
    trusted = signature_check.load_trusted([str(tmp_path / "team.pub")])
    assert signature_check.verify(registry, registry.digest(other), trusted).ok

