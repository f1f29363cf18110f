"""Seed the lab: nodes with NFD/GFD labels and real capacity, per-kernel driver DaemonSets, workloads, ledger."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpualign.base import labels as L
from gpualign.base.errors import LabError
from gpualign.kube.client import Kube
from gpualign.lab.scenarios import NodeSpec, Scenario
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.loaders.rules import load_rules
from gpualign.model.driver_tag import try_parse
from gpualign.model.kernels import Kernel
from gpualign.model.tags import os_tag, sanitize_kernel
from gpualign.model.version import DriverVersion

DRIVER_NAMESPACE = "gpu-operator"
DRIVER_REPO = "nvidia/driver"
LAB_LABEL = "gpualign.io/lab"


def driver_version_for(branch: str) -> str:
    """The full version the lab's images of a branch stand for (the operator's pinned version of it)."""
    rules = load_rules()
    return rules.branches.get(branch, f"{branch}.00.01")


def driver_labels(version: str | None) -> dict[str, str | None]:
    """GFD's labels for a loaded driver, both generations; None clears them (no driver loaded)."""
    if version is None:
        keys = [*L.DRIVER_CURRENT.values(), *L.DRIVER_LEGACY.values(), L.DRIVER_CURRENT_FULL]
        return dict.fromkeys(keys)
    v = DriverVersion.parse(version)
    minor = f"{v.minor:02d}"
    rev = "" if v.rev is None else f"{v.rev:02d}"
    return {
        L.DRIVER_CURRENT["major"]: str(v.major), L.DRIVER_CURRENT["minor"]: minor, L.DRIVER_CURRENT["rev"]: rev,
        L.DRIVER_CURRENT_FULL: str(v),
        L.DRIVER_LEGACY["major"]: str(v.major), L.DRIVER_LEGACY["minor"]: minor, L.DRIVER_LEGACY["rev"]: rev,
    }


def node_manifest(spec: NodeSpec) -> dict[str, Any]:
    labels: dict[str, str] = {"kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux",
                              L.ARCH: spec.arch, "type": "kwok", LAB_LABEL: "true"}
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "ephemeral-storage": "2Ti"}
    if spec.gpu and spec.dra:  # the operator's DRA mode: NFD's PCI label, no GFD label, no device plugin
        labels.update({L.PCI_NVIDIA: "true", L.DEPLOY_DRIVER: "true"})
    elif spec.gpu:
        labels.update({L.PCI_NVIDIA: "true", L.GPU_PRESENT: "true", L.GPU_PRODUCT: spec.product,
                       "nvidia.com/gpu.count": str(spec.gpus), L.DEPLOY_DRIVER: "true"})
        capacity["nvidia.com/gpu"] = str(spec.gpus)
    # as NFD labels the kernel (`+` cannot be in a label: `_`), and as the kubelet reports its release (`+`)
    kernel = Kernel.of(spec.kernel)
    labels.update({L.KERNEL: kernel.label, L.OS_ID: spec.os_id, L.OS_VERSION: spec.os_version,
                   L.OS_VERSION_MAJOR: spec.os_version.split(".")[0]})
    if spec.gpu and spec.driver and not spec.dra:
        labels.update({k: v for k, v in driver_labels(spec.driver).items() if v is not None})
    labels.update(spec.labels)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake", **spec.annotations}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   "nodeInfo": {"kernelVersion": kernel.release, "architecture": spec.arch,
                                "operatingSystem": "linux"}},
    }


def daemonset_name(kernel: str, ostag: str) -> str:
    return f"nvidia-driver-{sanitize_kernel(kernel)}-{ostag}"[:63].rstrip("-.")


def driver_daemonset(kernel: str, os_id: str, os_version: str, branch: str, registry: str) -> dict[str, Any]:
    """A GPU-operator-like precompiled driver DaemonSet for one kernel+OS pool (OnDelete). The kernel as NFD labels
    it: the operator selects nodes by that label and puts it in the tag."""
    kernel = Kernel.of(kernel).label
    ostag = os_tag(os_id, os_version, load_rules())
    tag = f"{branch}-{kernel}-{ostag}"
    name = daemonset_name(kernel, ostag)
    pod_labels = {"app": name, L.DRIVER_COMPONENT: L.DRIVER_COMPONENT_VALUE, L.PRECOMPILED: "true"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": DRIVER_NAMESPACE, "labels": dict(pod_labels)},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "nodeSelector": {L.DEPLOY_DRIVER: "true", L.KERNEL: kernel, L.OS_ID: os_id,
                                     L.OS_VERSION: os_version},
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [{"name": "nvidia-driver-ctr", "image": f"{registry}/{DRIVER_REPO}:{tag}"}],
                },
            },
        },
    }


def workloads() -> list[dict[str, Any]]:
    gpu_pod = {"nodeSelector": {L.GPU_PRESENT: "true"},
               "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                               "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "trainer", "namespace": "ml", "labels": {"app": "trainer"}},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "trainer"}},
                  "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": {
                      **gpu_pod,
                      # one replica per node, as data-parallel training replicas usually run
                      "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                          {"labelSelector": {"matchLabels": {"app": "trainer"}},
                           "topologyKey": "kubernetes.io/hostname"}]}}}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "trainer-pdb", "namespace": "ml"},
         "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly-eval", "namespace": "ml"},
         "spec": {"backoffLimit": 0, "template": {
             "metadata": {"labels": {"app": "nightly-eval"},
                          "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "120s"}},
             "spec": {"restartPolicy": "Never", "nodeSelector": {L.GPU_PRESENT: "true"},
                      "containers": [{"name": "eval", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "namespace": "apps", "labels": {"app": "web"}},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}},
    ]


def push_driver_image(registry: RegistryClient, tag: str, version: str, archs: tuple[str, ...] = ("amd64",)) -> None:
    """A synthetic driver image (no modules), labelled as NVIDIA labels its precompiled ones (`version=<branch>-
    <kernel>`), so that its own config says what it was built for, as a real one's does."""
    registry.push_image(tag, {"DRIVER_VERSION": version, "DRIVER_BRANCH": version.split(".")[0]},
                        labels=driver_image_labels(tag), archs=archs)


def driver_image_labels(tag: str) -> dict[str, str]:
    """NVIDIA's label for a precompiled tag (`version=535-6.1.0-50-amd64`); none for a tag of another shape."""
    spec = try_parse(tag)
    return {"version": f"{spec.branch}-{spec.kernel_label}"} if spec else {}


def registry_client(address: str) -> RegistryClient:
    return RegistryClient(RegistryRef(host=address, repo=DRIVER_REPO, scheme="http"))


def add_node(kube: Kube, spec: NodeSpec, *, branch: str, registry: str, driver_pool: bool = True) -> None:
    """Create a node and (driver_pool) make sure the lab's driver DaemonSet for its kernel+OS pool exists."""
    resp = kube.request("POST", "/api/v1/nodes", body=node_manifest(spec))
    if resp.status_code == 409:
        raise LabError(f"node {spec.name} already exists")
    if resp.status_code >= 400:
        raise LabError(f"creating node {spec.name}: HTTP {resp.status_code}: {resp.text[:200]}")
    if driver_pool and spec.gpu and node_manifest(spec)["metadata"]["labels"].get(L.DEPLOY_DRIVER) == "true":
        kube.apply(driver_daemonset(spec.kernel, spec.os_id, spec.os_version, branch, registry))
    if spec.gpu and spec.dra and spec.driver:  # NVIDIA's DRA driver publishes the node's GPUs
        from gpualign.lab import dra

        for obj in [*dra.device_classes(), dra.resource_slice(spec, spec.driver)]:
            plural = "deviceclasses" if obj["kind"] == "DeviceClass" else "resourceslices"
            kube.apply_at(f"/apis/resource.k8s.io/v1/{plural}/{obj['metadata']['name']}", obj)


def wait_nodes_ready(kube: Kube, names: list[str], *, timeout: float = 60.0) -> None:
    """Until every named node is Ready and carries no not-ready/unreachable taint."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for node in kube.nodes(label_selector=LAB_LABEL):
            name = node["metadata"]["name"]
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in node.get("status", {}).get("conditions") or [])
            tainted = any(t.get("key", "").startswith("node.kubernetes.io/not-ready")
                          or t.get("key", "").startswith("node.kubernetes.io/unreachable")
                          for t in node.get("spec", {}).get("taints") or [])
            if ready and not tainted:
                pending.discard(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise LabError(f"nodes not Ready and untainted after {timeout:.0f}s: {', '.join(sorted(pending))}")
        time.sleep(0.25)


def seed(kube: Kube, scenario: Scenario, registry: str, *,
         progress: Callable[[str], None] = lambda _m: None) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}})
    # The GPU Operator installs this RuntimeClass; GPU users that do not request nvidia.com/gpu rely on it.
    kube.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                "handler": "nvidia"})
    version = driver_version_for(scenario.branch)
    rules = load_rules()
    client = registry_client(registry)
    try:
        tags = sorted({f"{scenario.branch}-{n.kernel}-{os_tag(n.os_id, n.os_version, rules)}"
                       for n in scenario.nodes if n.gpu})
        progress(f"pushing {len(tags)} driver images to the lab registry {registry}/{DRIVER_REPO}")
        for tag in tags:
            push_driver_image(client, tag, version)
    finally:
        client.close()
    progress(f"creating {len(scenario.nodes)} nodes and their driver DaemonSets")
    for spec in scenario.nodes:
        loaded = spec.driver or (version if spec.gpu else None)
        add_node(kube, NodeSpec(**{**spec.__dict__, "driver": loaded}), branch=scenario.branch,
                 registry=registry)
    if scenario.workloads:
        progress("creating workloads: ml/trainer (+PDB), ml/nightly-eval Job, apps/web")
        for obj in workloads():
            kube.apply(obj)
    progress("waiting for nodes to be Ready and untainted")
    wait_nodes_ready(kube, [n.name for n in scenario.nodes])


def operator_image_tags(scenario: Scenario) -> dict[str, str]:
    """node -> the precompiled tag the operator at the lab's pinned version derives for it: branch of the node's pool,
    raw kernel, ID + the full VERSION_ID (this operator version does not cut RHEL to its major number)."""
    tags: dict[str, str] = {}
    for spec in scenario.nodes:
        if not spec.gpu:
            continue
        branch = scenario.branch
        for pool in scenario.pools:
            if all(spec.labels.get(k) == v for k, v in pool.node_selector.items()):
                branch = pool.branch
                break
        tags[spec.name] = f"{branch}-{spec.kernel}-{spec.os_id}{spec.os_version}"
    return tags


def seed_operator_fleet(kube: Kube, scenario: Scenario, registry: str, *,
                        progress: Callable[[str], None] = lambda _m: None) -> None:
    """Images for every node but the absent ones, and the nodes with no driver loaded: the operator deploys it."""
    client = registry_client(registry)
    try:
        tags = sorted({t for n, t in operator_image_tags(scenario).items() if n not in scenario.absent})
        progress(f"pushing {len(tags)} driver images to the lab registry {registry}/{DRIVER_REPO} "
                 f"(none for {', '.join(scenario.absent) or '-'})")
        for tag in tags:
            push_driver_image(client, tag, driver_version_for(tag.split("-", 1)[0]))
    finally:
        client.close()
    progress(f"creating {len(scenario.nodes)} nodes (no driver loaded yet)")
    for spec in scenario.nodes:
        resp = kube.request("POST", "/api/v1/nodes", body=node_manifest(spec))
        if resp.status_code >= 400 and resp.status_code != 409:
            raise LabError(f"creating node {spec.name}: HTTP {resp.status_code}: {resp.text[:200]}")
    progress("waiting for nodes to be Ready and untainted")
    wait_nodes_ready(kube, [n.name for n in scenario.nodes])
