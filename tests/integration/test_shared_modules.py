"""Modules one build compiled, reused by another through the ledger's registry (ensure.shared), never trusted blind.

The modules are NVIDIA's real ones for 6.1.0-50-amd64 (the one real compile, cached: a cold machine compiles them
here or waits for test_ensure_build's compile under the same lock). A run on a module cache of its own (nothing
compiled there, no build root) pulls them from `<repo>-modules`, checks them against the artifact and then with the
kernel's checks, and pushes the image without compiling. An artifact whose blob changed by one byte in the
registry's storage is refused by its digest; one pushed again consistently with one byte of a module's version
magic changed passes the artifact's checks and is refused by the kernel's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpualign.archive.apt import Archive
from gpualign.ensure import debian, shared
from gpualign.ensure.stage import verify_modules
from gpualign.lab import docker_registry, processes
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.loaders.archive_reading import ensure_root
from gpualign.model.driver_tag import parse

pytestmark = [pytest.mark.slow]

KERNEL = "6.1.0-50-amd64"
TAG = f"535-{KERNEL}-debian12"


@pytest.fixture(scope="module")
def compiled() -> debian.Built:
    return debian.compile_modules(Archive(), KERNEL, jobs=2)  # cached after the first compile on a machine


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    proc = docker_registry.start(tmp_path / "registry")
    try:
        yield proc.address, tmp_path / "registry" / "data"
    finally:
        processes.stop(proc)


def client(address: str) -> RegistryClient:
    return RegistryClient(RegistryRef(host=address, repo="nvidia/driver", scheme="http"), timeout=30.0)


def pulled_tree(address: str, where: Path) -> Path:
    """The image TAG pulled by buildah into a store of its own (which checks each blob's digest and each layer's
    diff_id) and mounted: its tree, as a container would see it."""
    store = ["buildah", "--root", str(where / "storage"), "--runroot", str(where / "run"), "--storage-driver", "vfs"]

    def run(*args: str) -> str:
        return subprocess.run([*store, *args], capture_output=True, text=True, check=True).stdout.strip()

    run("pull", "--quiet", "--tls-verify=false", f"docker://{address}/nvidia/driver:{TAG}")
    return Path(run("mount", run("from", "--pull-never", f"{address}/nvidia/driver:{TAG}")))


def key_of(built: debian.Built) -> shared.Key:
    return shared.Key(built.driver_version, KERNEL, "proprietary")


def own_cache(tmp_path: Path) -> dict[str, str]:
    """A cache of its own with no compiled modules and no build root; the archive's lists, the kernels'
    Module.symvers, the user space and the image storage are the machine's (they are not what is tested), and so
    are the locks, so that runs beside it never do the same work at once."""
    mine = tmp_path / "cache"
    (mine / "ensure").mkdir(parents=True)
    for part in ("apt", "symvers", "userspace", "locks", "images"):
        (ensure_root() / part).mkdir(parents=True, exist_ok=True)
        os.symlink(ensure_root() / part, mine / "ensure" / part)
    os.symlink(ensure_root().parent / "containers", mine / "containers")
    return {"GPUALIGN_CACHE": str(mine)}


def ensure(*args: str, env: dict[str, str]) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "gpualign", "ensure", *args, "-o", "json"], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=1500)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {}), proc.stderr


@pytest.mark.timeout(1800)
def test_a_build_shares_its_verified_modules_and_a_build_elsewhere_pulls_them_instead_of_compiling(
        compiled, registry, tmp_path):
    address, _data = registry
    ledger = f"registry://{address}/nvidia/driver"
    code, report, err = ensure(TAG, "--ledger", ledger, env={})
    assert code == 0, err
    (first,) = report["images"]
    assert first["modules"] in ("cache", "compiled") and first["shared"] == "pushed", first
    reg = client(address)
    manifest = reg.manifest(key_of(compiled).tag, "nvidia/driver-modules")
    assert manifest is not None and manifest["artifactType"] == shared.ARTIFACT_TYPE
    assert reg.tags() == [TAG] and reg.tags("nvidia/driver-modules") == [key_of(compiled).tag]  # beside the ledger
    label = (reg.image_config(TAG) or {})["config"]["Labels"]["io.gpualign.modules-sha256"]

    # the same tag is needed again (its image deleted), on a machine that never compiled anything
    resp = reg.http.delete(f"http://{address}/v2/nvidia/driver/manifests/{first['digest']}")
    assert resp.status_code == 202
    env = own_cache(tmp_path)
    code, report, err = ensure(TAG, "--ledger", ledger, env=env)
    assert code == 0, err
    (second,) = report["images"]
    assert (second["modules"], second["shared"], second["seconds"]["compile"]) == ("shared", "pulled", 0), second
    assert second["verification"]["ok"]
    assert second["verification"]["symbols_checked"] == first["verification"]["symbols_checked"] > 500
    assert not (tmp_path / "cache" / "ensure" / "build-roots").exists()  # no build root was made: no compile
    assert (reg.image_config(TAG) or {})["config"]["Labels"]["io.gpualign.modules-sha256"] == label
    reg.close()


@pytest.mark.timeout(1800)
def test_a_build_on_an_empty_disk_pulls_the_shared_user_space_and_pushes_only_its_modules_layer(
        compiled, registry, tmp_path):
    """The user space is shared as the modules are: a build whose disk has no image storage and no user space
    fetches `<repo>-userspace`, checks its user space in its tree as always, and composes the image over it in the
    registry: the image shares every layer but the modules' with the shared one, and a runtime pulls it whole."""
    address, _data = registry
    ledger = f"registry://{address}/nvidia/driver"
    maker, mine = tmp_path / "maker", tmp_path / "empty"
    for cache, parts in ((maker, ("apt", "symvers", "locks", "userspace", "modules")),  # no image storage
                         (mine, ("apt", "symvers", "locks"))):  # the archive's reading only
        (cache / "ensure").mkdir(parents=True)
        for part in parts:
            os.symlink(ensure_root() / part, cache / "ensure" / part)
    try:
        # a build that makes the image (its storage empty) shares the user-space image it made
        code, report, err = ensure(TAG, "--ledger", ledger, env={"GPUALIGN_CACHE": str(maker)})
        assert code == 0, err
        reg = client(address)
        (shared_tag,) = reg.tags("nvidia/driver-userspace")
        assert shared_tag.startswith("bookworm-amd64-535."), shared_tag
        resp = reg.http.delete(f"http://{address}/v2/nvidia/driver/manifests/{report['images'][0]['digest']}")
        assert resp.status_code == 202
        code, report, err = ensure(TAG, "--ledger", ledger, env={"GPUALIGN_CACHE": str(mine)})
        assert code == 0, err
        (image,) = report["images"]
        assert image["modules"] == "shared" and image["verification"]["ok"], image
        assert image["seconds"].get("userspace_pull", 0) > 0, err  # fetched
        # both guessed from the registry's tags and fetched while the archive was read (ensure.ahead), then taken
        # as the archive named the same version
        assert image["fetched_ahead"] == ["modules", "userspace"], image
        assert not (mine / "ensure" / "userspace").exists()  # nothing of the user space fetched from Debian
        assert not (mine / "containers").exists()  # composed in the registry: no local image store at all
        labels = (reg.image_config(TAG) or {})["config"]["Labels"]
        checked = json.loads(labels["io.gpualign.verified"])["userspace"]
        assert checked["nvidia_smi"] == compiled.driver_version  # its user space checked all the same
        layers = [x["digest"] for x in (reg.manifest(TAG) or {})["layers"]]
        base = [x["digest"] for x in (reg.manifest(shared_tag, "nvidia/driver-userspace") or {})["layers"]]
        assert layers[:-1] == base and len(layers) == len(base) + 1  # the modules' layer alone is the image's own
        tree = pulled_tree(address, tmp_path / "pulled")  # as a runtime takes it: every digest and diff_id checked
        video = tree / "lib" / "modules" / KERNEL / "kernel" / "drivers" / "video"
        assert sorted(p.name for p in video.glob("*.ko")) == sorted(p.name for p in compiled.modules)
        assert "nvidia.ko" in (tree / "lib" / "modules" / KERNEL / "modules.dep").read_text()
        assert (tree / "usr" / "bin" / "nvidia-smi").is_file() and (tree / "usr/local/bin/nvidia-driver").is_file()
    finally:
        shutil.rmtree(maker, ignore_errors=True)
        shutil.rmtree(mine, ignore_errors=True)
        if (tmp_path / "pulled").exists():
            subprocess.run(["buildah", "--root", str(tmp_path / "pulled" / "storage"), "--runroot",
                            str(tmp_path / "pulled" / "run"), "--storage-driver", "vfs", "rm", "--all"],
                           capture_output=True)
    reg.close()


def test_an_artifact_changed_by_one_byte_in_the_registrys_storage_is_refused(compiled, registry, tmp_path):
    address, data = registry
    reg = client(address)
    key = key_of(compiled)
    shared.push(reg, key, compiled.modules)
    layer = reg.manifest(key.tag, "nvidia/driver-modules")["layers"][0]  # type: ignore[index]
    blob = next(data.rglob(f"blobs/sha256/*/{layer['digest'].split(':')[1]}/data"))
    content = bytearray(blob.read_bytes())
    content[len(content) // 2] ^= 0x01
    blob.write_bytes(bytes(content))
    into = tmp_path / "modules" / "unsigned"
    with pytest.raises(shared.SharedRefused) as refused:
        shared.pull(reg, key, into)
    assert "is not what its manifest names" in refused.value.message
    assert not into.exists() and not list(into.parent.iterdir())  # nothing half-written
    reg.close()


def test_an_artifact_pushed_again_with_one_byte_of_a_modules_version_magic_changed_is_refused_by_the_kernels_checks(
        compiled, registry, tmp_path):
    address, _data = registry
    reg = client(address)
    key = key_of(compiled)
    forged = tmp_path / "forged"
    forged.mkdir()
    for ko in compiled.modules:
        shutil.copy2(ko, forged / ko.name)
    target = forged / "nvidia-drm.ko"
    content = bytearray(target.read_bytes())
    at = content.find(f"vermagic={KERNEL}".encode())
    assert at > 0
    content[at + len("vermagic=6.1.0-5")] = ord("9")  # 6.1.0-50 -> 6.1.0-59: one byte
    target.write_bytes(bytes(content))
    shared.push(reg, key, sorted(forged.glob("*.ko")))  # consistent: digests and config all describe the forgery

    into = tmp_path / "modules" / "unsigned"
    got = shared.pull(reg, key, into)  # the artifact's own checks pass: it is what it says it is
    assert got is not None and shared.pulled_from(into) is not None
    checked = verify_modules(got, parse(TAG), compiled.driver_version, Archive())
    assert not checked.ok
    assert "nvidia-drm" in checked.first_problem() and "6.1.0-59" in checked.first_problem()

    # a key that asks for another kernel is refused by what the artifact says of itself
    other = shared.Key(key.version, "6.1.0-47-amd64", key.flavour)
    manifest = reg.manifest(key.tag, "nvidia/driver-modules")
    reg.push_manifest(other.tag, manifest, "nvidia/driver-modules")  # type: ignore[arg-type]
    with pytest.raises(shared.SharedRefused, match="it is for"):
        shared.pull(reg, other, tmp_path / "other" / "unsigned")
    reg.close()
