"""A driver upgrade taints GPUs, not nodes: on the lab's `dra-driver-pods` scenario (GPUs that NVIDIA's DRA driver
publishes, drivers run by DaemonSet pods) gpualign's walk keeps dra-p1 schedulable and puts a NoSchedule
DeviceTaintRule on its GPUs (Kubernetes 1.37, GA). Judged by the lab's real scheduler: during the walk a CPU pod
still lands on dra-p1 and a new GPU claim is not allocated there; the claiming pod is moved as the walk moves GPU
pods; after the walk a new claim is allocated on dra-p1 again, and the rule is gone."""

from __future__ import annotations

import json

import pytest

from tests.recorder import Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import UpgradeProcess
from tests.support.waits import scheduled, unscheduled, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

STATE = "nvidia.com/gpu-driver-upgrade-state"
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
POOL = "5.15.0-124-generic-ubuntu22.04"


@pytest.fixture
def dlab(tmp_path):
    lab = start_lab(tmp_path / "state", "dra-driver-pods")
    assert lab.cli("lab", "push-image", f"580-{POOL}").code == 0
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    wait_for(lambda: kube.get("/api/v1/namespaces/ml/serviceaccounts/default"), what="default SA")
    yield lab
    run_cli("lab", "down", env=lab.env)


def apply(lab, tmp_path, *objs: dict) -> None:
    path = tmp_path / "objs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    done = lab.kubectl("apply", "-f", str(path))
    assert done.returncode == 0, done.stderr


def claiming(name: str, node: str) -> list[dict]:
    """A claim template for one NVIDIA GPU and a Deployment of one pod on `node` claiming from it."""
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"{name}-gpu", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    pod = {"nodeSelector": {"kubernetes.io/hostname": node},
           "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{name}-gpu"}],
           "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
                           "resources": {"claims": [{"name": "gpu"}]}}]}
    return [template, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml"},
                       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                                "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}]


def cpu_pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml", "labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}


@pytest.mark.timeout(420)
def test_the_walk_taints_a_dra_nodes_gpus_and_leaves_the_node_schedulable(dlab, tmp_path):
    kube = dlab.kube()
    apply(dlab, tmp_path, *claiming("trainer", "dra-p1"),
          {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer-pdb",
                                                                                 "namespace": "ml"},
           "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}})
    scheduled(kube, "ml", "trainer", 1, timeout=60)
    # the new driver loads slowly (a real one takes minutes): the walk waits in pod-restart-required meanwhile
    slow = {"spec": {"template": {"metadata": {"annotations": {"driver-sim.gpualign.io/load-delay": "25s"}}}}}
    pools = kube.list_raw("/apis/apps/v1/namespaces/gpu-operator/daemonsets")
    assert len(pools) == 1, [p["metadata"]["name"] for p in pools]
    assert dlab.kubectl("-n", "gpu-operator", "patch", "daemonset", pools[0]["metadata"]["name"], "--type",
                        "merge", "-p", json.dumps(slow)).returncode == 0
    ledger = f"registry://{dlab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    walk = UpgradeProcess.start(dlab.env, "-l", "kubernetes.io/hostname=dra-p1", "--to-branch", "580",
                                "--ledger", ledger)
    try:
        walk.wait_line("its GPUs tainted NoSchedule", timeout=90)
        rule = kube.get(f"{RULES}/gpualign-upgrade-dra-p1")
        assert rule is not None and rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "dra-p1"}
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        walk.wait_line("→ pod-restart-required", timeout=90)
        node = kube.get("/api/v1/nodes/dra-p1")
        assert not node["spec"].get("unschedulable"), "the node was cordoned"
        # CPU work still lands there; a new GPU claim does not
        apply(dlab, tmp_path, cpu_pod("cpu-work", "dra-p1"), *claiming("fresh", "dra-p1"))
        assert scheduled(kube, "ml", "cpu-work", 1, timeout=30)[0]["spec"]["nodeName"] == "dra-p1"
        reason = unscheduled(kube, "ml", "fresh", timeout=30)
        assert "taint" in reason.lower() or "cannot allocate all claims" in reason, reason
        assert walk.proc.wait(timeout=180) == 0, "\n".join(walk.lines[-30:])
    finally:
        if walk.proc.poll() is None:
            walk.proc.kill()
        recorder.stop()
    assert kube.get(f"{RULES}/gpualign-upgrade-dra-p1") is None, "the rule outlived the walk"
    done = kube.get("/api/v1/nodes/dra-p1")
    assert done["metadata"]["labels"][STATE] == "upgrade-done"
    assert "gpualign.io/upgrade-device-taint" not in (done["metadata"].get("annotations") or {})
    assert not any((c.obj.get("spec") or {}).get("unschedulable") for c in recorder.of("node")
                   if c.name == "dra-p1"), "dra-p1 was cordoned at some point of the walk"
    # after the walk a new claim is allocated on dra-p1 again
    apply(dlab, tmp_path, *claiming("after", "dra-p1"))
    assert scheduled(kube, "ml", "after", 1, timeout=60)[0]["spec"]["nodeName"] == "dra-p1"
    status = dlab.cli("status", "-l", "kubernetes.io/hostname=dra-p1")
    assert "upgrade-done" in status.out, status.out


def test_status_names_the_health_taints_nvidias_dra_driver_puts_on_a_walked_nodes_gpus(dlab):
    kube = dlab.kube()
    path = "/apis/resource.k8s.io/v1/resourceslices/dra-p2-gpu.nvidia.com"
    sliced = kube.get(path)
    assert sliced is not None
    sliced["spec"]["devices"][1]["taints"] = [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"}]
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        sliced["metadata"].pop(key, None)
    kube.apply_at(path, sliced)
    data = json.loads(dlab.cli("status", "-o", "json").out)
    tainted = {n["name"]: n["gpu_taints"] for n in data["nodes"] if n.get("gpu_taints")}
    assert tainted == {"dra-p2": [f"{sliced['spec']['devices'][1]['name']} gpu.nvidia.com/gpu-lost:NoExecute"]}
    assert data["gpu_tainted"] == 1
    assert "GPUs tainted by NVIDIA's DRA driver: 1 node(s)" in dlab.cli("status").out
