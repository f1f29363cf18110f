"""A lab whose processes were all SIGKILLed while its real node ran pods: `lab down`, then `lab up`, leave nothing
of the old node on the host (processes, mounts, cgroups, iptables chains, the bridge, log links, the claim)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from gpualign.lab import cluster, realnode
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def on_host(state_dir: Path) -> dict[str, list[str]]:
    state = cluster.LabState.load(state_dir)
    record = (state.extra.get("real_node") if state else None) or {}
    return realnode.leftovers(state_dir, record)


def test_a_killed_labs_real_node_is_cleaned_by_down_and_the_next_up(tmp_path):
    state_dir = tmp_path / "state"
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    lab = start_lab(state_dir, "empty", real_node=True)
    try:
        image = lab.cli("lab", "push-self", timeout=300).out.strip()
        kube = lab.kube()
        base = {"nodeSelector": {realnode.LABEL: "true"},
                "tolerations": [{"key": realnode.LABEL, "operator": "Exists"}]}
        for name, host in (("bridged", False), ("hostnet", True)):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": realnode.NAMESPACE},
                   "spec": {**base, "hostNetwork": host,
                            "containers": [{"name": "c", "image": image, "command": ["sleep", "600"]}]}}
            assert kube.request("POST", f"/api/v1/namespaces/{realnode.NAMESPACE}/pods", body=pod).status_code == 201
        for name in ("bridged", "hostnet"):
            wait_for(lambda n=name: kube.get(f"/api/v1/namespaces/{realnode.NAMESPACE}/pods/{n}")["status"]
                     .get("phase") == "Running", timeout=90)
        before = on_host(state_dir)
        # What the check looks for is really there while the node runs (so an empty result later means something).
        assert before["processes"] and before["mounts"] and before["cgroups"] and before["bridge"]
        assert before["iptables"] and before["logLinks"] and before["shimSockets"] and before["runDir"]
        assert realnode.CLAIM.exists()

        state = cluster.LabState.load(state_dir)
        assert state is not None
        for proc in state.procs.values():  # the whole lab dies at once; containerd's shims and the pods live on
            os.kill(proc.pid, signal.SIGKILL)
        wait_for(lambda: not any(p.alive() for p in state.procs.values()), timeout=10)
        assert on_host(state_dir)["processes"], "the pods outlive a killed lab: the cleanup has work to do"

        down = run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})
        assert down.code == 0, down.err
        assert on_host(state_dir) == {k: [] for k in before}
        assert not realnode.CLAIM.exists() and not state_dir.exists()
        assert not [s for s in before["shimSockets"] if Path(s).exists()]  # named from the state dir, now gone

        # Killed again, this time cleaned by the next `lab up` in the same place (no `lab down` in between).
        lab = start_lab(state_dir, "empty", real_node=True)
        state = cluster.LabState.load(state_dir)
        assert state is not None
        for proc in state.procs.values():
            os.kill(proc.pid, signal.SIGKILL)
        wait_for(lambda: not any(p.alive() for p in state.procs.values()), timeout=10)
        again = run_cli("lab", "up", "--scenario", "empty", "--real-node", env={"GPUALIGN_LAB_DIR": str(state_dir)},
                        timeout=300)
        assert again.code == 0 and "cleaning up first" in again.err, again.err
        status = json.loads(run_cli("lab", "status", "-o", "json", env={"GPUALIGN_LAB_DIR": str(state_dir)}).out)
        assert status["realNode"]["ready"] is True
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})
    assert on_host(state_dir) == {k: [] for k in realnode.leftovers(state_dir, {})}
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forward  # the node never changes forwarding
