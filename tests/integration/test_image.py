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
def pushed(lab):
    # `make setup` built it; this makes sure it is the image of this source (cached when it is).
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_image.py")], capture_output=True,
                           text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-2000:]
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
