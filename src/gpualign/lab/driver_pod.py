"""A driver image run on the lab's real node as the GPU Operator runs it: the operator's own driver container spec.

The spec is the pod template of the operator's driver DaemonSet for the image's kernel when the lab runs the operator
(the operator-* scenarios; a DaemonSet owned by a ClusterPolicy or an NVIDIADriver), else the operator's manifest
(its asset `state-driver/0500_daemonset.yaml`, from the module version the lab builds) with the image filled in, as
the operator fills it. Two changes, both because the lab is offline: the init container (NVIDIA's
k8s-driver-manager, whose image is not reachable; on a node with no driver loaded it has nothing to evict or unload)
is left out, and the real node's taint is tolerated. Only the driver container (`nvidia-driver-ctr`) runs; the side
containers need a MOFED, GDS or OpenShift driver toolkit. `lab run-driver` also makes it a pod of one run
(restartPolicy Never), so its whole log is read.

The spec mounts /run/nvidia Bidirectional and /run/mellanox/drivers HostToContainer, which need a shared host
mount: systemd makes / shared on every node, and a host without systemd has it private. So for the run each is
bind-mounted on itself and made shared, and /dev/log (journald's socket on a systemd node) is made; afterwards
everything the run or the pod made on the host is removed (host_prepared).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruamel.yaml import YAML

from gpualign.base.errors import LabError
from gpualign.kube.client import Kube
from gpualign.lab import operator, realnode

if TYPE_CHECKING:
    from gpualign.lab.cluster import LabState

CONTAINER = "nvidia-driver-ctr"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
# What the operator's spec makes on the host (its DirectoryOrCreate volumes, the lock file): removed afterwards
HOST_PATHS = ("/run/nvidia", "/run/nvidia/validations", "/run/nvidia/driver", "/run/nvidia/driver/lib",
              "/run/nvidia/driver/lib/firmware", "/run/nvidia/nvidia-driver.pid", "/run/nvidia-fabricmanager",
              "/run/nvidia-topologyd", "/run/mellanox", "/run/mellanox/drivers", "/run/mellanox/drivers/usr",
              "/run/mellanox/drivers/usr/src", "/dev/log")
SHARED = ("/run/nvidia", "/run/mellanox/drivers")


@dataclass
class Run:
    source: str  # where the spec came from
    pod: dict[str, Any]  # the pod as the API server stored it
    exit_code: int | None  # None: still running at the end (it loaded, or waits)
    log: str
    seconds: float  # pod created -> container terminated (or the wait's end)


def selected_as(kernel: str, os_id: str, os_version: str) -> dict[str, str]:
    """The labels by which the GPU Operator picks a GPU node of this kernel and OS for its driver DaemonSet (NFD's,
    and the operator's own deploy label), which the kubelet checks against the spec's nodeSelector."""
    return {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.deploy.driver": "true", KERNEL_LABEL: kernel,
            "feature.node.kubernetes.io/system-os_release.ID": os_id,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": os_version,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": os_version.split(".")[0]}


def operator_spec(kube: Kube, bin_dir: Path, image: str, kernel: str, namespace: str) -> tuple[dict[str, Any], str]:
    """(the driver DaemonSet's pod template, where it came from) for `kernel`, with the image set."""
    for ds in kube.get_json(f"/apis/apps/v1/namespaces/{namespace}/daemonsets")["items"]:
        owners = {o.get("kind") for o in ds["metadata"].get("ownerReferences") or []}
        if not owners & {"ClusterPolicy", "NVIDIADriver"}:
            continue  # the lab's own driver DaemonSets (for the simulated nodes) only look like the operator's
        spec = ds["spec"]["template"]["spec"]
        if (spec.get("nodeSelector") or {}).get(KERNEL_LABEL) == kernel and \
                any(c["name"] == CONTAINER for c in spec["containers"]):
            template = json.loads(json.dumps(ds["spec"]["template"]))
            return template, f"the GPU Operator's DaemonSet {namespace}/{ds['metadata']['name']}"
    # the ClusterPolicy path's asset (plain YAML; the NVIDIADriver path's manifests are Go templates)
    path = operator.operator_files(bin_dir) / "opt" / "gpu-operator" / "state-driver" / "0500_daemonset.yaml"
    template = YAML(typ="safe").load(path.read_text())["spec"]["template"]
    for c in template["spec"]["containers"]:
        c["image"] = image
    template["spec"].pop("serviceAccountName", None)  # the operator makes it with the DaemonSet; here there is none
    return template, f"the GPU Operator's manifest {path.name}"


def pod_for(template: dict[str, Any], name: str, namespace: str, **changes: Any) -> dict[str, Any]:
    """The template as a pod on the real node: the driver container only, no init container, the node's taint
    tolerated, the volumes it mounts; `changes` set on the pod spec."""
    spec = json.loads(json.dumps(template["spec"]))
    spec.pop("initContainers", None)
    spec["containers"] = [c for c in spec["containers"] if c["name"] == CONTAINER]
    spec["nodeName"] = realnode.NAME
    spec["tolerations"] = [*(spec.get("tolerations") or []),
                           {"key": realnode.LABEL, "operator": "Exists", "effect": "NoSchedule"}]
    spec.update(changes)
    used = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts") or []}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] in used]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": namespace, "labels": {"gpualign.io/lab-driver-run": name}}}


@contextlib.contextmanager
def host_prepared() -> Iterator[None]:
    """The host as a systemd node has it for the operator's spec (see the module's doc), undone afterwards."""
    before = {p for p in HOST_PATHS if os.path.lexists(p)}
    mounted: list[str] = []
    sock = None
    try:
        for path in SHARED:
            os.makedirs(path, exist_ok=True)
            for step in (["mount", "--bind", path, path], ["mount", "--make-shared", path]):
                done = subprocess.run(step, capture_output=True, text=True)
                if done.returncode != 0:
                    raise LabError(f"preparing {path} for the operator's spec: {done.stderr.strip()}")
                if step[1] == "--bind":
                    mounted.append(path)
        if "/dev/log" not in before:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind("/dev/log")
        yield
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-R", "-l", path], capture_output=True)
        if sock is not None:
            sock.close()
        for path in sorted(set(HOST_PATHS) - before, key=lambda x: x.count("/"), reverse=True):
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)


def leftovers(before: set[str]) -> list[str]:
    return [p for p in HOST_PATHS if os.path.lexists(p) and p not in before]


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if term:
            return dict(term)
    return None


def run(kube: Kube, kubectl: list[str], pod: dict[str, Any], source: str, *, timeout: float = 120.0,
        until_ready: float = 20.0) -> Run:
    """Create the pod on the real node, wait until its driver container terminates (or, running, until_ready
    seconds), read its log, and delete it. kubectl: the command that reads logs (`kubectl --kubeconfig …`)."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    resp = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
    if resp.status_code != 201:
        raise LabError(f"creating {ns}/{name} on the real node: HTTP {resp.status_code} {resp.text[:200]}")
    started = time.monotonic()
    term: dict[str, Any] | None = None
    running_since: float | None = None
    try:
        while time.monotonic() - started < timeout:
            got = kube.get(path) or {}
            term = _terminated(got)
            if term is not None:
                break
            states = [s.get("state") or {} for s in (got.get("status") or {}).get("containerStatuses") or []]
            if any("running" in s for s in states):
                running_since = running_since or time.monotonic()
                if time.monotonic() - running_since > until_ready:
                    break
            time.sleep(0.2)
        seconds = time.monotonic() - started
        stored = kube.get(path) or pod
        previous = term is not None and not ((stored.get("status") or {}).get("containerStatuses") or [{}])[0] \
            .get("state", {}).get("terminated")
        log = subprocess.run([*kubectl, "logs", "-n", ns, name, "-c", CONTAINER,
                              *(["--previous"] if previous else [])], capture_output=True, text=True,
                             timeout=30).stdout
    finally:
        kube.request("DELETE", path, params={"gracePeriodSeconds": "0"})
        deadline = time.monotonic() + 60
        while kube.get(path) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    return Run(source, stored, None if term is None else int(term.get("exitCode", -1)), log, seconds)


def run_on_real_node(state: LabState, image: str, kernel: str, os_id: str, os_version: str, *, namespace: str,
                     timeout: float, progress: Callable[[str], None]) -> Run:
    """`gpualign lab run-driver`: the image run once on the lab's real node, labelled as the operator selects a GPU
    node of that kernel and OS, with the operator's own driver container (its DaemonSet for the kernel when the lab
    runs the operator, else its manifest). The node's labels are put back afterwards, whatever happened."""
    with Kube(str(state.kubeconfig)) as kube:
        node_path = f"/api/v1/nodes/{realnode.NAME}"
        before = dict(kube.get_json(node_path)["metadata"].get("labels") or {})
        try:
            kube.patch(node_path, {"metadata": {"labels": selected_as(kernel, os_id, os_version)}})
            if "gpu-operator" in state.procs:  # the operator renders a DaemonSet for a kernel once a node has it
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    template, source = operator_spec(kube, Path(state.bin_dir), image, kernel, namespace)
                    if "DaemonSet" in source:
                        break
                    time.sleep(0.5)
            template, source = operator_spec(kube, Path(state.bin_dir), image, kernel, namespace)
            kube.patch(node_path, {"metadata": {"labels": template["spec"].get("nodeSelector") or {}}})
            progress(f"running {image} on {realnode.NAME} with {source}'s driver container")
            # restartPolicy Never (the DaemonSet's is Always): one run, its whole log
            pod = pod_for(template, f"driver-{kernel}"[:63].rstrip("-."), namespace, restartPolicy="Never")
            kubectl = [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", str(state.kubeconfig)]
            with host_prepared():
                return run(kube, kubectl, pod, source, timeout=timeout)
        finally:
            now = kube.get_json(node_path)["metadata"].get("labels") or {}
            kube.patch(node_path, {"metadata": {"labels": {k: before.get(k) for k in now if before.get(k) != now[k]}}})
