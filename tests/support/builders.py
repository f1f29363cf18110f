"""Kubernetes objects as the API returns them, for unit tests: a GPU node as NFD and GFD label it, and a workload
pod. Each test names only what it is about; the rest is a plain, healthy default."""

from __future__ import annotations

from typing import Any

from gpualign.base import labels as L

GPU = "nvidia.com/gpu"


def node(name: str = "n1", *, base: bool = True, kernel: str = "5.15.0-124-generic", os_id: str = "ubuntu",
         os_version: str = "22.04", arch: str | None = None, annotations: dict[str, str] | None = None,
         resource_version: str | None = None, **labels: str | None) -> dict[str, Any]:
    """A Node. base: labelled as a GPU node (nvidia.com/gpu.present, kernel, OS); else only `labels`. A label given
    None is left out (a base one too)."""
    given = {L.GPU_PRESENT: "true", L.KERNEL: kernel, L.OS_ID: os_id, L.OS_VERSION: os_version} if base else {}
    if arch:
        given[L.ARCH] = arch
    given.update(labels)
    meta: dict[str, Any] = {"name": name, "labels": {k: v for k, v in given.items() if v is not None}}
    if annotations is not None:
        meta["annotations"] = annotations
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def pod(name: str, *, node: str = "n", namespace: str = "ml", gpu: str | None = GPU,
        labels: dict[str, str] | None = None, owner: str | None = None, phase: str = "Running",
        runtime: str | None = None, claims: bool = False, empty_dir: bool = False) -> dict[str, Any]:
    """A pod on `node`. gpu: the extended resource its container asks for (None: none); owner: its controller's
    kind (None: a bare pod); runtime: its runtimeClassName; claims: a DRA resource claim; empty_dir: a scratch
    volume."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    spec: dict[str, Any] = {"nodeName": node,
                            "containers": [{"name": "c", "resources": {"limits": {gpu: "1"}} if gpu else {}}]}
    if runtime:
        spec["runtimeClassName"] = runtime
    if claims:
        spec["resourceClaims"] = [{"name": "gpu"}]
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}
