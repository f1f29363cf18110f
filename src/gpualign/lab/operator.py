"""NVIDIA's GPU Operator in the lab: its CRDs, a ClusterPolicy (and NVIDIADrivers), and the real operator binary run
out of cluster against the lab's API server. The operator creates the driver DaemonSets; kwok places their pods; the
driver simulator plays the kubelet's image pull for them, as for any driver pod.

The binary reads its manifests from a hard-coded /opt/gpu-operator (its image COPYs them there). The lab never writes
to the host's /opt: the operator runs in a private mount namespace (`unshare --mount --propagation private`) in which
the tree `lab build` cached is bind-mounted over /opt. The mount exists for that one process and ends with it; no
patched binary, no chroot. Not root: `--map-root-user` does the same in a user namespace.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gpualign.base import labels as L
from gpualign.base.errors import LabError
from gpualign.kube.client import Kube
from gpualign.lab import processes, versions
from gpualign.lab.cluster import _http_ok
from gpualign.lab.processes import Proc
from gpualign.lab.scenarios import DriverPool, Scenario

NAMESPACE = "gpu-operator"
REPO = "nvidia"  # the lab registry's repository prefix: driver images live at nvidia/driver
CLUSTER_POLICY = "cluster-policy"
CP_PATH = "/apis/nvidia.com/v1/clusterpolicies"
ND_PATH = "/apis/nvidia.com/v1alpha1/nvidiadrivers"
VALIDATOR = "app=nvidia-operator-validator"
WAITING = ("ImagePullBackOff", "ErrImagePull")


def operator_files(bin_dir: Path) -> Path:
    """The cached binary, opt/ tree and CRDs; a one-line error naming the build step when absent."""
    root = versions.operator_dir(bin_dir)
    if not os.access(root / "gpu-operator", os.X_OK) or not (root / "opt" / "gpu-operator" / "manifests").is_dir():
        raise LabError(f"the GPU Operator is not built in {root}: run `gpualign lab build` first")
    return root


def crds(bin_dir: Path) -> list[dict[str, Any]]:
    return [YAML(typ="safe").load(p.read_text()) for p in sorted((operator_files(bin_dir) / "crds").glob("*.yaml"))]


def _upgrade_policy() -> dict[str, Any]:
    # podDeletion and drain must be present: the operator dereferences both (see shared/OPERATOR-LAB.md §2).
    return {"autoUpgrade": False, "maxParallelUpgrades": 1, "maxUnavailable": "25%",
            "waitForCompletion": {"timeoutSeconds": 0},
            "podDeletion": {"force": False, "timeoutSeconds": 60, "deleteEmptyDir": False},
            "drain": {"enable": False, "force": False, "timeoutSeconds": 60, "deleteEmptyDir": False}}


def cluster_policy(registry: str, scenario: Scenario) -> dict[str, Any]:
    """Precompiled drivers from the lab registry; only the driver and validator operands on. Labelled with the
    operator's version as its Helm chart labels it (app.kubernetes.io/version), which is how gpualign tells which
    naming rules the operator follows."""
    repo = f"{registry}/{REPO}"
    driver: dict[str, Any] = {
        "enabled": True, "usePrecompiled": True, "repository": repo, "image": "driver", "version": scenario.branch,
        "manager": {"repository": repo, "image": "k8s-driver-manager", "version": "v0.8.1"},
        "upgradePolicy": _upgrade_policy()}
    if scenario.operator == "nvidiadriver":
        driver["useNvidiaDriverCRD"] = True
    off = {"enabled": False}
    return {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": CLUSTER_POLICY, "labels": {
            "app.kubernetes.io/component": "gpu-operator", "app.kubernetes.io/name": "gpu-operator",
            "app.kubernetes.io/version": versions.GPU_OPERATOR}},
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "daemonsets": {},
            "driver": driver,
            "validator": {"repository": repo, "image": "gpu-operator-validator", "version": "v25.3.4"},
            "toolkit": off, "devicePlugin": off, "dcgm": off, "dcgmExporter": off, "gfd": off, "migManager": off,
            "nodeStatusExporter": off, "sandboxWorkloads": off,
        },
    }


def nvidia_driver(pool: DriverPool, registry: str) -> dict[str, Any]:
    repo = f"{registry}/{REPO}"
    return {
        "apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": pool.name},
        "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": repo, "image": "driver",
                 "version": pool.branch, "nodeSelector": dict(pool.node_selector),
                 "manager": {"repository": repo, "image": "k8s-driver-manager", "version": "v0.8.1"}},
    }


def install(kube: Kube, bin_dir: Path, scenario: Scenario, registry: str,
            progress: Callable[[str], None] = lambda _m: None) -> None:
    """CRDs (from the same module version as the binary), the operator's namespace, ClusterPolicy, NVIDIADrivers."""
    progress("installing the GPU Operator's CRDs (ClusterPolicy, NVIDIADriver)")
    names = []
    for crd in crds(bin_dir):
        kube.apply(crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            obj = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise LabError(f"CRD {name} not Established after 30s")
            time.sleep(0.1)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kube.apply_at(f"{CP_PATH}/{CLUSTER_POLICY}", cluster_policy(registry, scenario))
    for pool in scenario.pools:
        kube.apply_at(f"{ND_PATH}/{pool.name}", nvidia_driver(pool, registry))


def argv(bin_dir: Path, kubeconfig: Path, metrics_port: int, health_port: int) -> list[str]:
    """The operator under a private bind of the cached tree over /opt. `exec` keeps one pid: the operator's."""
    root = operator_files(bin_dir)
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--mount", "--propagation", "private", *userns, "--",
            "sh", "-c", 'mount --bind "$0" /opt && exec "$@"', str(root / "opt"),
            str(root / "gpu-operator"), f"--kubeconfig={kubeconfig}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}"]


def start(state_dir: Path, bin_dir: Path, kubeconfig: Path) -> Proc:
    """Start the operator and wait until it reports ready. OPERATOR_NAMESPACE is required; UNIT_TEST=true stops it
    reading /host-etc/os-release (only the non-precompiled ClusterPolicy path reads it)."""
    if not Path("/opt").is_dir():
        raise LabError("/opt does not exist: the GPU Operator's files are bind-mounted over it (nothing is written)")
    metrics, health = processes.free_port(), processes.free_port()
    env = {"OPERATOR_NAMESPACE": NAMESPACE, "UNIT_TEST": "true"}
    cmd = argv(bin_dir, kubeconfig, metrics, health)
    proc = processes.start("gpu-operator", cmd, state_dir / "logs" / "gpu-operator.log", env=env,
                           address=f"http://127.0.0.1:{metrics}/metrics", exe=cmd[cmd.index("sh") + 4])

    processes.wait_until(proc, _http_ok(f"http://127.0.0.1:{health}/readyz"), timeout=60, what="ready", port=health)
    return proc


def _decided(pod: dict[str, Any]) -> str | None:
    """'ready', 'pull-failed', or None while undecided."""
    status = pod.get("status") or {}
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
        return "ready"
    for cs in status.get("containerStatuses") or []:
        if ((cs.get("state") or {}).get("waiting") or {}).get("reason") in WAITING:
            return "pull-failed"
    return None


def wait_deployed(kube: Kube, scenario: Scenario, *, timeout: float = 180.0,
                  progress: Callable[[str], None] = lambda _m: None) -> dict[str, str]:
    """Until every GPU node has an operator driver pod that is Ready or failed to pull (the absent image), and a
    Ready validator pod. Returns node -> driver pod outcome."""
    gpu_nodes = {n.name for n in scenario.nodes if n.gpu}
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        outcome: dict[str, str] = {}
        for pod in kube.pods(NAMESPACE, label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (state := _decided(pod)) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                outcome[node] = state
        validated = {(p.get("spec") or {}).get("nodeName") for p in kube.pods(NAMESPACE, label_selector=VALIDATOR)
                     if _decided(p) == "ready"}
        todo = sorted((gpu_nodes - set(outcome)) | (gpu_nodes - validated))
        if not todo:
            return outcome
        note = f"waiting for the operator's driver and validator pods on {', '.join(todo)}"
        if note != last:
            progress(note)
            last = note
        if time.monotonic() > deadline:
            raise LabError(f"the GPU Operator did not deploy to {', '.join(todo)} within {timeout:.0f}s "
                           "(see logs/gpu-operator.log in the lab's state directory)")
        time.sleep(0.5)
