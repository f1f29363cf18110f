"""Two walks started at the same moment on overlapping selectors, and etcd frozen mid-walk.

A recorder watching every node change checks that the limits held and nothing was done twice.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gpualign import labels as L
from gpualign.lab import cluster
from gpualign.lab.seed import driver_version_for
from tests.conftest import run_cli, start_lab
from tests.recorder import Recorder
from tests.upgrade_helpers import UpgradeProcess

pytestmark = [pytest.mark.lab, pytest.mark.slow]

POOLS = ["5.15.0-124-generic-ubuntu22.04", "6.8.0-48-generic-ubuntu24.04", "6.8.0-1015-aws-ubuntu22.04",
         "6.8.0-1017-azure-ubuntu24.04", "6.8.0-1015-gcp-ubuntu22.04"]


@pytest.fixture(scope="module")
def rlab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("races") / "state")
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    assert lab.cli("lab", "push-image", f"580-{POOLS[-1]}").code == 0  # the scenario's unpublished kernel, now both
    lab.kube().patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    yield lab
    run_cli("lab", "down", env=lab.env)


def states(lab) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state", "")
            for n in lab.kube().nodes(f"{L.GPU_PRESENT}=true")}


def test_two_walks_on_overlapping_selectors_one_refuses_and_nothing_is_done_twice(rlab):
    ledger = f"registry://{rlab.registry}/nvidia/driver"
    recorder = Recorder(rlab.kube()).start()
    try:
        a = UpgradeProcess.start(rlab.env, "--to-branch", "595", "--ledger", ledger, "--max-parallel", "2")
        b = UpgradeProcess.start(rlab.env, "--to-branch", "595", "--ledger", ledger, "--max-parallel", "2",
                                 "-l", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
        codes = {a.finish(timeout=300), b.finish(timeout=300)}
    finally:
        recorder.stop()
    outputs = a.output + "\n" + b.output
    assert codes == {0, 1}, outputs
    loser = a if a.proc.returncode == 1 else b
    assert "another gpualign upgrade is running" in loser.output, loser.output
    assert "→ cordon-required" not in loser.output  # the refusal came before any write
    assert set(states(rlab).values()) == {"upgrade-done"}
    assert recorder.most_walking_at_once() <= 2
    for node in states(rlab):  # each node entered the walk exactly once
        seen = [c.obj["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state") for c in recorder.of("node")
                if c.name == node]
        starts = sum(1 for before, after in zip(seen, seen[1:], strict=False)
                     if after == "cordon-required" and before != after)
        assert starts == 1, (node, seen)


def test_etcd_frozen_mid_walk_is_ridden_out(rlab):
    ledger = f"registry://{rlab.registry}/nvidia/driver"
    etcd = cluster.LabState.load(rlab.state_dir).procs["etcd"]
    walk = UpgradeProcess.start(rlab.env, "--to-branch", "580", "--ledger", ledger, "--max-parallel", "2")
    walk.wait_line("→ pod-deletion-required", timeout=120)
    os.kill(etcd.pid, signal.SIGSTOP)  # etcd stops answering; the API server's requests hang behind it
    try:
        time.sleep(8)
    finally:
        os.kill(etcd.pid, signal.SIGCONT)
    assert walk.finish(timeout=300) == 0, walk.output
    assert set(states(rlab).values()) == {"upgrade-done"}
    nodes = rlab.kube().nodes(f"{L.GPU_PRESENT}=true")
    assert {n["metadata"]["labels"].get(L.DRIVER_CURRENT_FULL) for n in nodes} == {driver_version_for("580")}
    assert not [n for n in nodes if n["spec"].get("unschedulable")]
