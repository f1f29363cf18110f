"""Driver images signed as cosign signs them (gpualign.model.cosign, gpualign.ensure.signatures), on a registry of
its own (Debian's docker-registry on 127.0.0.1): signed by digest, verified by a trusted key, and refused for a
signature by another key, a signature over another digest, and an image re-pushed under the tag after signing.
cosign's own `verify` reads these signatures in tests/integration/test_cosign.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpualign.base.errors import BadInput
from gpualign.ensure import signatures
from gpualign.judging import signature_check
from gpualign.model import cosign
from tests.support.cosign_keys import key_pair

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "cosign"


def test_the_payload_is_the_simple_signing_document_cosign_marshals():
    digest = "sha256:" + "ab" * 32
    data = cosign.payload("registry.local:5000/nvidia/driver", digest)
    assert data == (GOLDEN / "payload.json").read_bytes().rstrip(b"\n")
    assert cosign.read_payload(data) == cosign.Signed("registry.local:5000/nvidia/driver", digest)
    assert cosign.signature_tag(digest) == "sha256-" + "ab" * 32 + ".sig"
    manifest, config = cosign.signature_manifest([(data, "c2ln")])
    assert manifest == json.loads((GOLDEN / "signature-manifest.json").read_text())
    assert json.loads(config)["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    with pytest.raises(ValueError, match="not a simple-signing payload"):
        cosign.read_payload(b'{"critical": {}}')


def test_signed_by_digest_verified_by_the_trusted_key_and_refused_otherwise(registry, tmp_path):
    ours, ours_pub = key_pair(tmp_path, "ours")
    _, theirs_pub = key_pair(tmp_path, "theirs")
    tag = "535-6.1.0-50-amd64-debian12"
    registry.push_image(tag, {"KERNEL": "6.1.0-50-amd64"})
    digest = registry.digest(tag)
    assert digest is not None
    trusted = signature_check.load_trusted([str(ours_pub)])
    assert signature_check.verify(registry, digest, trusted).why.startswith("no signature")
    where = signatures.sign(registry, tag, signatures.load_private_key(ours))
    assert where == cosign.signature_tag(digest)
    assert signature_check.verify(registry, digest, trusted) == signature_check.Verdict("ours.pub", None)
    other = signature_check.verify(registry, digest, signature_check.load_trusted([str(theirs_pub)]))
    assert not other.ok and "a key not trusted here" in other.why
    # signing again with the same key replaces its layer; another key's signature is kept beside it
    signatures.sign(registry, tag, signatures.load_private_key(ours))
    manifest = registry.manifest(where)
    assert manifest is not None and len(manifest["layers"]) == 1
    # re-pushed under the tag after signing: another digest, with no signature of its own
    registry.push_image(tag, {"KERNEL": "6.1.0-50-amd64", "REPUSHED": "1"})
    again = registry.digest(tag)
    assert again != digest and signature_check.verify(registry, again, trusted).why.startswith("no signature")
    # a signature manifest copied onto another image's signature tag names the first digest: refused
    registry.push_manifest(cosign.signature_tag(again), manifest)
    moved = signature_check.verify(registry, again, trusted)
    assert not moved.ok and "a signature of another image" in moved.why


def test_keys_that_cannot_sign_or_be_trusted_are_one_line_each(tmp_path):
    text = tmp_path / "key.txt"
    text.write_text("not a key")
    with pytest.raises(BadInput, match="not a private key cosign or gpualign can read"):
        signatures.load_private_key(text)
    with pytest.raises(BadInput, match="not a PEM public key"):
        signature_check.load_trusted([str(text)])
    with pytest.raises(BadInput, match="cannot read the trusted key"):
        signature_check.load_trusted([str(tmp_path / "absent.pub")])


def test_with_trusted_keys_a_build_takes_only_shared_modules_signed_by_one(registry, tmp_path, monkeypatch):
    """Anyone who can write to the registry could swap in shared modules that pass the kernel's checks: with a trusted
    key, a build takes only what that key signed, and compiles otherwise (SharedRefused). A builder with a signing
    key signs what it shares."""
    from gpualign.ensure import shared

    ours, ours_pub = key_pair(tmp_path, "ours")
    module = tmp_path / "built" / "nvidia.ko"
    module.parent.mkdir()
    module.write_bytes(b"\x7fELF not really a module")
    key = shared.Key("535.261.03", "6.1.0-50-amd64", "proprietary")
    shared.push(registry, key, [module])  # no signing key: shared unsigned
    trusted = signature_check.load_trusted([str(ours_pub)])
    with pytest.raises(shared.SharedRefused, match="not signed by a trusted key"):
        shared.pull(registry, key, tmp_path / "cache-a", trusted)
    assert not (tmp_path / "cache-a").exists() or not any((tmp_path / "cache-a").glob("*.ko"))  # nothing taken
    shared.push(registry, key, [module], signatures.load_private_key(ours))  # a builder with the key shares it signed
    pulled = shared.pull(registry, key, tmp_path / "cache-b", trusted)
    assert pulled is not None and [p.name for p in pulled] == ["nvidia.ko"]
