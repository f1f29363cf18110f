"""The cuda issue's scenario: the real scheduler honours the injected driver floor."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import scheduled, unscheduled, wait_for

pytestmark = pytest.mark.lab

DRIVERS = {"gpu-535": "535.309.01", "gpu-550": "550.163.01", "gpu-580a": "580.95.05", "gpu-580b": "580.95.05"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("cuda-lab") / "state", scenario="empty")
    for name, driver in DRIVERS.items():
        res = lab.cli("lab", "add-node", name, "--driver", driver, "--host-driver")
        assert res.code == 0, res.err
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    wait_for(lambda: kube.get("/api/v1/namespaces/ml/serviceaccounts/default"), what="default SA")
    yield lab
    run_cli("lab", "down", env=lab.env)


def deployment(name: str) -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: ml
spec:
  replicas: 4
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: main  # CUDA app
        image: nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04
        resources:
          limits: {{nvidia.com/gpu: 1}}
"""


def apply_injected(lab, name: str, cuda: str) -> None:
    injected = lab.cli("cuda", "inject", "--cuda", cuda, "-f", "-", input=deployment(name))
    assert injected.code == 0, injected.err
    applied = subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                             input=injected.out, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr


def test_cuda_12_8_schedules_only_onto_580_nodes(fleet):
    apply_injected(fleet, "cuda128", "12.8")
    kube = fleet.kube()
    pods = scheduled(kube, "ml", "cuda128", 4)
    assert {p["spec"]["nodeName"] for p in pods} <= {"gpu-580a", "gpu-580b"}


def test_cuda_13_2_stays_pending_with_failedscheduling(fleet):
    apply_injected(fleet, "cuda132", "13.2")
    kube = fleet.kube()
    reason = unscheduled(kube, "ml", "cuda132")
    assert "didn't match Pod's node affinity/selector" in reason, reason


def test_cuda_check_names_the_nodes_that_cannot_host(fleet):
    res = fleet.cli("cuda", "check", "--cuda", "12.4", "-o", "json")
    assert res.code == 1
    data = json.loads(res.out)
    assert [n["name"] for n in data["unable"]] == ["gpu-535"]
    assert data["lowest_driver"] == "535.309.01" and data["minimum_driver"] == "550.54.14"
    assert fleet.cli("cuda", "check", "--cuda", "12.2").code == 0
    table = fleet.cli("cuda", "check", "--cuda", "12.4")
    assert "1 cannot: gpu-535" in table.out
    wide = fleet.cli("cuda", "check", "--cuda", "12.4", "-o", "wide")
    head, *rows = wide.out.splitlines()[1:-1]
    assert head.split() == ["NODE", "CAN", "HOST", "DRIVER", "KERNEL", "ARCH", "REASON"]
    row = next(r for r in rows if r.startswith("gpu-535 "))
    assert "amd64" in row and row.endswith("driver 535.309.01 is below 550.54.14"), row


def test_cuda_check_reads_cuda_version_from_an_image_config(fleet):
    assert fleet.cli("lab", "push-image", "12.8.1-base-ubuntu22.04", "--repo", "nvidia/cuda",
                     "--cuda-version", "12.8.1").code == 0
    res = fleet.cli("cuda", "check", "--image", f"{fleet.registry}/nvidia/cuda:12.8.1-base-ubuntu22.04",
                    "-o", "json")
    assert res.code == 1, res.err
    data = json.loads(res.out)
    assert data["cuda"] == "12.8.1" and data["minimum_driver"] == "570.124.06"
    assert sorted(n["name"] for n in data["unable"]) == ["gpu-535", "gpu-550"]
    missing = fleet.cli("cuda", "check", "--image", f"{fleet.registry}/nvidia/cuda:nope")
    assert missing.code == 2 and "not found in the registry" in missing.err


def test_why_tells_a_host_driver_a_cpu_node_and_a_missing_node_apart(fleet):
    host = fleet.cli("why", "gpu-535")
    assert host.code == 0 and host.out.startswith("gpu-535's driver is installed on the host "
                                                  "(nvidia.com/gpu.deploy.driver=false), version 535.309.01"), host.out
    assert fleet.cli("lab", "add-node", "cpu-x", "--no-gpu").code == 0
    cpu = fleet.cli("why", "cpu-x")
    assert cpu.code == 0 and cpu.out.startswith("cpu-x is not a GPU node (no nvidia.com/gpu.present=true label, no "
                                              "NVIDIA PCI device labelled by NFD"), cpu.out
    gone = fleet.cli("why", "no-such-node")
    assert gone.code == 2 and gone.err == "gpualign: error: node 'no-such-node' not found\n"
