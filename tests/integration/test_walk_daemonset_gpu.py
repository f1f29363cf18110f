"""A DaemonSet pod that holds a GPU, on the lab's real control plane: eviction cannot move it (its DaemonSet places a
new one at once), so the walk keeps it off with a NoExecute taint. The real taint manager deletes it, the real
DaemonSet controller places none while the taint stays, and the pod comes back once the new driver is validated. A
recorder replays every change: while the node's driver is restarted and validated, no such pod is on it."""

from __future__ import annotations

import json

import pytest

from tests.recorder import STATE, Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import POOLS
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

TAINT = "gpualign.io/driver-upgrade"


@pytest.fixture
def dlab(tmp_path):
    lab = start_lab(tmp_path / "state")
    assert lab.cli("lab", "push-image", f"595-{POOLS[0]}").code == 0
    yield lab
    run_cli("lab", "down", env=lab.env)


def monitor() -> dict:
    """A GPU health exporter as many fleets run one: a DaemonSet whose pods ask for a GPU on every GPU node."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "gpu-monitor", "namespace": "ml"},
            "spec": {"selector": {"matchLabels": {"app": "gpu-monitor"}}, "template": {
                "metadata": {"labels": {"app": "gpu-monitor"}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-a1"}, "containers": [{
                    "name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def monitors_on_a1(world) -> list[str]:  # noqa: ANN001 - tests.recorder.World
    return [name for name, pod in world.pods.items() if (pod.get("metadata") or {}).get("labels", {}).get("app")
            == "gpu-monitor" and (pod.get("spec") or {}).get("nodeName") == "gpu-a1"
            and not pod["metadata"].get("deletionTimestamp")]


@pytest.mark.timeout(420)
def test_a_daemonset_gpu_pod_is_kept_off_while_the_driver_is_replaced_and_comes_back(dlab, tmp_path):
    kube = dlab.kube()
    assert dlab.kubectl("-n", "ml", "delete", "pdb", "trainer-pdb").returncode == 0  # this walk is about the monitor
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(monitor()))
    assert dlab.kubectl("apply", "-f", str(path)).returncode == 0
    wait_for(lambda: any(p["spec"].get("nodeName") == "gpu-a1" and p["status"].get("phase") == "Running"
                         for p in kube.pods("ml", label_selector="app=gpu-monitor")), timeout=60,
             what="the monitor running on gpu-a1")
    ledger = f"registry://{dlab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    try:
        res = dlab.cli("upgrade", "-l", "kubernetes.io/hostname=gpu-a1", "--to-branch", "595", "--ledger", ledger,
                       "--yes", timeout=300)
    finally:
        recorder.stop()
    assert res.code == 0, res.out + res.err
    said = res.out + res.err
    assert f"tainted {TAINT}:NoExecute: DaemonSet pods holding a GPU (ml/gpu-monitor-" in said, said
    assert "its DaemonSet GPU pods may come back" in said
    restarting = seen = 0
    for change, _before, world in recorder.replay():
        state = ((world.nodes.get("gpu-a1") or {}).get("metadata") or {}).get("labels", {}).get(STATE)
        if state in ("pod-restart-required", "validation-required"):
            seen += 1
            assert monitors_on_a1(world) == [], (state, change.kind, change.name)
            restarting += change.kind == "node"
    assert seen and restarting, "the recorder never saw gpu-a1's driver restarted"
    node = kube.get("/api/v1/nodes/gpu-a1")
    assert not any(t.get("key") == TAINT for t in node["spec"].get("taints") or []), "the taint outlived the walk"
    assert node["metadata"]["labels"][STATE] == "upgrade-done"
    wait_for(lambda: any(p["spec"].get("nodeName") == "gpu-a1" and not p["metadata"].get("deletionTimestamp")
                         for p in kube.pods("ml", label_selector="app=gpu-monitor")), timeout=60,
             what="the monitor back on gpu-a1 after the walk")
