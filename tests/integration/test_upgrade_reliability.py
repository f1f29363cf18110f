"""The upgrade survives SIGKILL at every state boundary, retries conflicts, and only ever evicts.

Checked afterwards against the cluster and the API server's audit log (the lab's apiserver writes one).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess

import pytest

from gpualign.base import labels as L
from gpualign.base.errors import Conflict
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import BOUNDARIES, POOLS, UpgradeProcess
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]



@pytest.fixture(scope="module")
def rlab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("reliability") / "state")
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    kube = lab.kube()
    kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    yield lab
    run_cli("lab", "down", env=lab.env)


def audit_entries(lab) -> list[dict]:
    path = lab.state_dir / "logs" / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(900)  # nine kills; one that lands mid-eviction can hold a PDB for 2 minutes
def test_sigkill_at_every_state_boundary_then_resume(rlab):
    lab = rlab
    ledger = f"registry://{lab.registry}/nvidia/driver"
    kube = lab.kube()
    assert lab.kubectl("cordon", "gpu-d1").returncode == 0  # an admin's cordon, before the run
    cordoned_before = {"gpu-d1"}
    kills = 0
    for boundary in BOUNDARIES:
        walk = UpgradeProcess.start(lab.env, "--to-branch", "595", "--ledger", ledger)
        try:
            walk.wait_line(boundary, timeout=200)  # a kill mid-eviction can hold a PDB for 2 min (docs/reliability.md)
        except AssertionError:
            if walk.proc.poll() == 0:
                break  # nothing left to interrupt
            raise
        os.kill(walk.proc.pid, signal.SIGKILL)
        walk.finish(timeout=10)
        kills += 1
    assert kills >= 6
    final = UpgradeProcess.start(lab.env, "--to-branch", "595", "--ledger", ledger)
    assert final.finish(timeout=300) == 0, final.output

    nodes = {n["metadata"]["name"]: n for n in kube.nodes(f"{L.GPU_PRESENT}=true")}
    assert {x["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state") for x in nodes.values()} == \
        {"upgrade-done"}
    assert {x["metadata"]["labels"][L.DRIVER_CURRENT_FULL] for x in nodes.values()} == {"595.91.07"}
    assert {n for n, x in nodes.items() if x["spec"].get("unschedulable")} == cordoned_before

    ours = [e for e in audit_entries(lab) if e.get("userAgent", "").startswith("gpualign-upgrade/")]
    removals = [e for e in ours if e["objectRef"].get("resource") == "pods" and e["verb"] in ("delete",
                                                                                             "deletecollection")]
    evictions = [e for e in ours if e["objectRef"].get("subresource") == "eviction"]
    assert removals == []  # every pod the upgrade removed went through the Eviction API
    assert len(evictions) >= len(nodes)  # at least each node's driver pod
    uncordons = [e for e in ours if e["objectRef"].get("resource") == "nodes"
                 and e["objectRef"].get("name") in cordoned_before]
    assert all(e["verb"] == "patch" for e in uncordons)
    assert nodes["gpu-d1"]["spec"].get("unschedulable") is True


def test_a_stale_write_gets_409_and_the_next_pass_retries_on_a_fresh_object(rlab):
    from gpualign.loaders.rules import load_rules
    from gpualign.upgrade import snapshot
    from gpualign.upgrade.executor import Executor
    from gpualign.upgrade.upgrade_policy import UpgradePolicy

    kube = rlab.kube()
    snap = snapshot.take(kube, "kubernetes.io/hostname=gpu-a1", ledger=None, rules=load_rules(), to_branch=None)
    stale = snap.nodes["gpu-a1"]
    kube.patch("/api/v1/nodes/gpu-a1", {"metadata": {"labels": {"gpualign.io/touched": "yes"}}})  # someone else
    ex = Executor(kube, UpgradePolicy())
    with pytest.raises(Conflict):
        ex.move(stale, "upgrade-done")
    fresh = snapshot.take(kube, "kubernetes.io/hostname=gpu-a1", ledger=None, rules=load_rules(), to_branch=None)
    ex.move(fresh.nodes["gpu-a1"], fresh.nodes["gpu-a1"].view.state or "upgrade-done")
    wait_for(lambda: kube.get("/api/v1/nodes/gpu-a1")["metadata"]["labels"].get("gpualign.io/touched") == "yes",
             what="the other writer's label kept")


def test_an_api_server_restart_mid_walk_is_survived(tmp_path):
    lab = start_lab(tmp_path / "state")
    try:
        for pool in POOLS:
            assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
        lab.kube().patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb",
                         {"spec": {"minAvailable": 1}})
        ledger = f"registry://{lab.registry}/nvidia/driver"
        walk = UpgradeProcess.start(lab.env, "--to-branch", "595", "--ledger", ledger)
        walk.wait_line("→ pod-deletion-required", timeout=90)
        res = lab.cli("lab", "restart", "kube-apiserver", "--pause", "3")
        assert res.code == 0, res.err
        assert walk.finish(timeout=300) == 0, walk.output
        assert "api-server: unreachable, retrying" in walk.output
        assert "reachable again" in walk.output
        states = {n["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state")
                  for n in lab.kube().nodes(f"{L.GPU_PRESENT}=true")}
        assert states == {"upgrade-done"}
    finally:
        run_cli("lab", "down", env=lab.env)


def test_a_second_walk_refuses_while_another_holds_the_lock(rlab):
    from gpualign.upgrade.lock import hold

    ledger = f"registry://{rlab.registry}/nvidia/driver"
    kube = rlab.kube()
    with hold(kube, "kube-system"):  # a live walk (this test process) holds the lock
        second = rlab.cli("upgrade", "--ledger", ledger, "--yes")
        assert second.code == 1, second.err
        assert "another gpualign upgrade is running (gpualign-upgrade@" in second.err
        assert "refusing to run two walks at once" in second.err
    # a holder killed on this host (its pid is gone) is taken over at once
    gone = _dead_pid()
    kube.patch("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpualign-upgrade",
               {"spec": {"holderIdentity": f"gpualign-upgrade@{socket.gethostname()}/{gone}",
                         "renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}})
    after = rlab.cli("upgrade", "--ledger", ledger, "--yes")
    assert after.code == 0, after.err


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_refusing_pdb_fails_the_node_after_the_timeout_with_the_reason_kept(tmp_path):
    lab = start_lab(tmp_path / "state")
    try:
        ledger = f"registry://{lab.registry}/nvidia/driver"
        for pool in POOLS:
            assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
        kube = lab.kube()
        node = wait_for(lambda: next((p["spec"].get("nodeName") for p in kube.pods("ml", label_selector="app=trainer")
                                      if p["spec"].get("nodeName")), None), what="a trainer pod placed")
        # The operator's order cordons the node whatever its PDB says (PDB-aware admission would hold it before
        # cordon): the refusal after cordon, its timeout and the reason kept are what this test is about.
        res = lab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--yes", "-l",
                      f"kubernetes.io/hostname={node}", "--eviction-timeout", "6", "--admission", "operator",
                      timeout=120)
        assert res.code == 1
        obj = kube.get(f"/api/v1/nodes/{node}")
        assert obj["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-failed"
        reason = obj["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
        assert reason.startswith("pod deletion timed out after 6s: eviction of ml/trainer-")
        assert "refused by PDB ml/trainer-pdb: 2 healthy, 2 required, 0 disruptions allowed" in reason
        assert f"{node} (upgrade-failed): pod deletion timed out after 6s" in res.out
        why = lab.cli("why", node)
        assert f"{node} is in upgrade-failed" in why.out
        assert "pod deletion timed out after 6s" in why.out
        assert "nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite" in why.out
    finally:
        run_cli("lab", "down", env=lab.env)
