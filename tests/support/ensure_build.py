"""The one real build's kernel and tag, and what the tests read back of an image with the kernel's own tools."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import httpx2

from gpualign.archive.apt import Archive
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from tests.support.waits import wait_for

KERNEL, OTHER = "6.1.0-50-amd64", "6.1.0-47-amd64"  # the one real build, and the kernel it must not pass for
TAG = f"535-{KERNEL}-debian12"


def client(registry: str, repo: str = "nvidia/driver") -> RegistryClient:
    return RegistryClient(RegistryRef(host=registry, repo=repo, scheme="http"), timeout=30.0)


def symvers(kernel: str) -> dict[str, int]:
    """The kernel's Module.symvers (fetched from its headers package), as the test reads it itself."""
    out = {}
    for line in Archive().symvers(kernel).read_text().splitlines():
        crc, sym = line.split("\t")[:2]
        out[sym] = int(crc, 16)
    return out


def modversions(ko: Path) -> dict[str, int]:
    dump = subprocess.run(["modprobe", "--dump-modversions", str(ko)], capture_output=True, text=True, check=True)
    return {line.split()[1]: int(line.split()[0], 16) for line in dump.stdout.splitlines() if line.strip()}


def pulled_modules(registry: str, tag: str, into: Path, repo: str = "nvidia/driver",
                   rootfs: Path | None = None) -> tuple[dict, list[str]]:
    """The image's config, and its files, with every .ko under /lib/modules extracted into `into` (and, given
    `rootfs`, all its layers unpacked there, in order)."""
    reg = client(registry, repo)
    manifest = reg.manifest(tag)
    assert manifest is not None
    config = json.loads(reg.blob(manifest["config"]["digest"]))
    names: list[str] = []
    for layer in manifest["layers"]:  # read plainly: a module layer is larger than the ledger client's body cap
        blob = httpx2.get(f"http://{registry}/v2/{repo}/blobs/{layer['digest']}", timeout=120,
                          follow_redirects=True)
        assert blob.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(blob.content)) as tf:
            if rootfs is not None:
                tf.extractall(rootfs)  # noqa: S202 - the image this test built
            for member in tf.getmembers():
                names.append(member.name)
                if member.name.endswith(".ko") and member.name.lstrip("./").startswith("lib/modules/"):
                    data = tf.extractfile(member)
                    assert data is not None
                    (into / Path(member.name).name).write_bytes(data.read())
    reg.close()
    return config, names


def gpu_workload_on(kube, node: str, name: str) -> dict:
    """A one-replica GPU Deployment pinned to `node`, Ready; its pod is returned."""
    kube.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                               "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base",
                                                               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    return wait_for(lambda: next((p for p in kube.pods("default", label_selector=f"app={name}")
                                  if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in (p.get("status") or {}).get("conditions") or [])), None),
                    timeout=60, what=f"{name}'s pod Ready on {node}")
