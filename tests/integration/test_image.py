"""The container image is really built (buildah, by `make setup`), pushed to the lab registry, read back through the
registry API (entrypoint, non-root user, OCI labels, compressed size), and run: `gpualign --version` inside it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpualign import __version__
from gpualign.base.cache import cache_root
from gpualign.ledger.registry import connect
from tests.support.cli import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.slow]
IMAGE = f"localhost/gpualign:{__version__}"
LIMIT_MB = 120  # compressed, as pushed (the target)


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    storage = cache_root() / "containers"
    proc = subprocess.run(["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "run"),
                           "--storage-driver", "vfs", *args], capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"buildah {' '.join(args)}: {proc.stderr[-1000:]}"
    return proc


@pytest.fixture(scope="module")
def built() -> None:
    # `make setup` built it; this makes sure it is the image of this source (cached when it is).
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_image.py")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def pushed(lab, built):
    ref = f"{lab.registry}/gpualign:{__version__}"
    buildah("push", "--quiet", "--tls-verify=false", IMAGE, f"docker://{ref}")
    return ref


def test_the_pushed_image_is_non_root_with_its_entrypoint_and_labels(pushed, lab):
    client = connect(f"registry://{lab.registry}/gpualign")
    try:
        manifest = client.manifest(__version__)
        config = client.image_config(__version__)
    finally:
        client.close()
    assert manifest is not None and config is not None
    cfg = config["config"]
    assert cfg["User"] == "65532:65532" and cfg["Entrypoint"] == ["gpualign"]
    assert cfg["Cmd"] == ["controller", "--help"] and "8080/tcp" in cfg["ExposedPorts"]
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.title"] == "gpualign"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    compressed = sum(layer["size"] for layer in manifest["layers"]) + manifest["config"]["size"]
    assert compressed <= LIMIT_MB * 1024 * 1024, f"{compressed / 2**20:.1f} MiB"
    print(f"image {pushed}: {compressed / 2**20:.1f} MiB compressed, {len(manifest['layers'])} layers")


def test_gpualign_runs_inside_the_image_pulled_back_from_the_registry(pushed):
    ctr = buildah("from", "--quiet", "--tls-verify=false", f"docker://{pushed}").stdout.strip()
    try:
        version = buildah("run", "--isolation", "chroot", ctr, "--", "gpualign", "--version").stdout
        who = buildah("run", "--isolation", "chroot", ctr, "--", "id", "-u").stdout.strip()
    finally:
        buildah("rm", ctr, check=False)
        buildah("rmi", pushed, check=False)  # the pulled name: a lab registry's port, never used again
    assert version.startswith(f"gpualign {__version__}\nrules: driver images named as GPU Operator v")
    assert who == "65532"


def test_a_published_image_is_signed_and_carries_its_sbom_as_cosign_reads_them(built, tmp_path):
    """scripts/publish_image.py with a key: cosign verifies the signature and the SPDX attestation with the public
    key, and `cosign download sbom` gives the SBOM `make image` read from the image (its Debian packages and
    gpualign itself, at their versions). Without the key it is pushed unsigned, and cosign refuses it."""
    import json
    import os

    from gpualign.lab import versions
    from tests.support.cosign_keys import key_pair, own_registry

    key, public = key_pair(tmp_path, "own")
    cosign_bin = str(versions.cosign_binary())
    env = {**os.environ, "COSIGN_PASSWORD": "", "HOME": str(tmp_path)}

    def cosign(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cosign_bin, *args, "--allow-http-registry"], capture_output=True, text=True,
                              timeout=120, env=env)

    def publish(ref: str, *extra: str) -> list[str]:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "publish_image.py"), ref, *extra],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    with own_registry(tmp_path / "registry") as registry:
        unsigned = publish(f"{registry.ref.host}/platform/gpualign:unsigned")[0]
        assert cosign("verify", "--key", str(public), "--insecure-ignore-tlog=true", unsigned).returncode != 0
        said = publish(f"{registry.ref.host}/platform/gpualign:{__version__}", "--key", str(key))
        assert said[1:] == [said[0].split("@")[1].replace(":", "-") + s for s in (".sig", ".att", ".sbom")]
        verified = cosign("verify", "--key", str(public), "--insecure-ignore-tlog=true", said[0])
        assert verified.returncode == 0, verified.stderr
        attested = cosign("verify-attestation", "--key", str(public), "--type", "spdxjson",
                          "--insecure-ignore-tlog=true", said[0])
        assert attested.returncode == 0, attested.stderr
        downloaded = cosign("download", "sbom", said[0])
        assert downloaded.returncode == 0, downloaded.stderr
    sbom = json.loads(downloaded.stdout)
    versions_of = {p["name"]: p.get("versionInfo") for p in sbom["packages"]}
    assert sbom["spdxVersion"] == "SPDX-2.3" and sbom["name"] == said[0]
    assert versions_of["gpualign"] == __version__ and versions_of["python3"] and versions_of["libc6"]
    assert any(ref["referenceLocator"].startswith("pkg:deb/debian/gpgv@") for p in sbom["packages"]
               for ref in p.get("externalRefs", []))
