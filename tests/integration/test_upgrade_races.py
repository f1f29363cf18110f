"""Two walks started at the same moment on overlapping selectors, and etcd frozen mid-walk.

A recorder watching every node change checks that the limits held and nothing was done twice.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gpualign.base import labels as L
from gpualign.lab import cluster
from gpualign.lab.driver_sim import LOAD_DELAY
from gpualign.lab.seed import driver_version_for
from tests.recorder import Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import POOLS, UpgradeProcess
from tests.support.waits import pod_ready, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]



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


def slow_pod_on(lab, node: str) -> None:
    """A GPU pod on the node, so the walk there has a pod to evict (and says so: the test's marker)."""
    kube = lab.kube()
    kube.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "slow", "namespace": "ml"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "slow"}},
                         "template": {"metadata": {"labels": {"app": "slow"},
                                                   "annotations": {"pod-delete.stage.kwok.x-k8s.io/delay": "15s"}},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                               "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base",
                                                               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    wait_for(lambda: any(pod_ready(p) for p in kube.pods("ml", label_selector="app=slow")), what="the slow pod")


@pytest.mark.parametrize("narrow_first", [False, True], ids=["together", "narrow-walk-holds-the-lock"])
def test_two_walks_on_overlapping_selectors_one_refuses_and_nothing_is_done_twice(rlab, narrow_first):
    ledger = f"registry://{rlab.registry}/nvidia/driver"
    branch = "580" if narrow_first else "595"  # the second case walks back
    pool = "/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-driver-5.15.0-124-generic-ubuntu22.04"
    if narrow_first:
        slow_pod_on(rlab, "gpu-a1")  # an H100 node: the narrow walk evicts it first
        # ... and its new driver takes 45 s to load, so the narrow walk holds the lock in validation while the
        # fleet-wide one asks for it (that one needs a few seconds to start): not a race between two processes
        rlab.kube().patch(pool, {"spec": {"template": {"metadata": {"annotations": {LOAD_DELAY: "45s"}}}}})
    recorder = Recorder(rlab.kube()).start()
    try:
        b = UpgradeProcess.start(rlab.env, "--to-branch", branch, "--ledger", ledger, "--max-parallel", "2",
                                 "-l", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
        if narrow_first:
            b.wait_line("evicted ml/slow-", timeout=120)
        a = UpgradeProcess.start(rlab.env, "--to-branch", branch, "--ledger", ledger, "--max-parallel", "2")
        codes = {a.finish(timeout=300), b.finish(timeout=300)}
    finally:
        recorder.stop()
        if narrow_first:
            rlab.kube().patch(pool, {"spec": {"template": {"metadata": {"annotations": {LOAD_DELAY: None}}}}})
    outputs = a.output + "\n" + b.output
    assert codes == {0, 1}, outputs
    loser = a if a.proc.returncode == 1 else b
    assert "another gpualign upgrade is running" in loser.output, loser.output
    assert "→ cordon-required" not in loser.output  # the refusal came before any write
    winner = b if loser is a else a
    if narrow_first:
        assert winner is b  # it held the lock by the time the fleet-wide walk asked
    h100 = {n["metadata"]["name"] for n in rlab.kube().nodes("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")}
    scope = h100 if winner is b else set(states(rlab))  # whichever walk got the lock decides what was walked
    assert len(h100) >= 2 and scope
    final = states(rlab)
    before = {c.name: (c.obj["metadata"]["labels"] or {}).get("nvidia.com/gpu-driver-upgrade-state", "")
              for c in recorder.of("node") if c.type == "LISTED"}
    assert {n for n, s in final.items() if s == "upgrade-done"} >= scope, final
    assert all(final[n] == before.get(n, "") for n in final if n not in scope), final  # the loser touched nothing
    assert recorder.most_walking_at_once() <= 2
    for node in final:  # each node in scope entered the walk exactly once; the others never
        seen = [c.obj["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state") for c in recorder.of("node")
                if c.name == node]
        starts = sum(1 for before, after in zip(seen, seen[1:], strict=False)
                     if after == "cordon-required" and before != after)
        assert starts == (1 if node in scope else 0), (node, seen)


def test_etcd_frozen_mid_walk_is_ridden_out(rlab):
    ledger = f"registry://{rlab.registry}/nvidia/driver"
    etcd = cluster.LabState.load(rlab.state_dir).procs["etcd"]
    walk = UpgradeProcess.start(rlab.env, "--to-branch", "595", "--ledger", ledger, "--max-parallel", "2")
    walk.wait_line("→ pod-deletion-required", timeout=120)
    os.kill(etcd.pid, signal.SIGSTOP)  # etcd stops answering; the API server's requests hang behind it
    try:
        time.sleep(8)
    finally:
        os.kill(etcd.pid, signal.SIGCONT)
    assert walk.finish(timeout=300) == 0, walk.output
    assert set(states(rlab).values()) == {"upgrade-done"}
    nodes = rlab.kube().nodes(f"{L.GPU_PRESENT}=true")
    assert {n["metadata"]["labels"].get(L.DRIVER_CURRENT_FULL) for n in nodes} == {driver_version_for("595")}
    assert not [n for n in nodes if n["spec"].get("unschedulable")]
