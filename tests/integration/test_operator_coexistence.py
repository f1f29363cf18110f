"""Together, safely: NVIDIA's GPU Operator walks the train pool to 595 (autoUpgrade on) while `gpualign controller
--gate-operator-upgrades` runs beside it, through the whole walk (one node gated, then released when its image is
pushed) and then GPUALIGN_COEXIST_IDLE seconds of quiet (300 in `make test`: 60 of the controller's 5 s ledger
refreshes and two of the operator's 2-minute requeues, every periodic loop on either side several times over).
An admin cordoned gpu-a2 beforehand.

From the API server's audit log and a recorder watching every node change: gpualign's writes per node are few and
none at all while idle; no label or annotation flaps; no Event storm; the admin's cordon is never undone."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from gpualign.lab.processes import free_port
from tests.recorder import STATE, Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

IDLE = float(os.environ.get("GPUALIGN_COEXIST_IDLE", "300"))
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
GATED = "gpualign.io/upgrade-gated"
DRIVER = "nvidia.com/cuda.driver-version.full"
OURS = {"DriverImageMissing", "DriverImageAvailable", "DriverImageMismatch", "DriverUpgradeGated",
        "DriverUpgradeReleased"}
TRAIN = ("gpu-a1", "gpu-a2", "gpu-c1")


def audit(lab, since_iso: str = "") -> list[dict]:
    path = lab.state_dir / "logs" / "audit.log"
    out = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("stage") == "ResponseComplete" and entry.get("requestReceivedTimestamp", "") >= since_iso:
            out.append(entry)
    return out


def node_writes(entries: list[dict], agent: str) -> Counter[str]:
    return Counter((e.get("objectRef") or {}).get("name", "?") for e in entries
                   if e.get("userAgent", "").startswith(agent) and e.get("verb") in ("patch", "update")
                   and (e.get("objectRef") or {}).get("resource") == "nodes")


def transitions(recorder: Recorder, name: str, read) -> int:  # noqa: ANN001
    values, last = 0, object()
    for c in recorder.of("node"):
        if c.name != name or c.type == "DELETED":
            continue
        value = read(c.obj)
        if value != last:
            values += 1
            last = value
    return values - 1  # changes after the first observed value


@pytest.mark.timeout(int(IDLE) + 600)
def test_the_operators_walk_and_the_gate_side_by_side_then_idle(tmp_path):
    lab = start_lab(tmp_path / "state", "operator-nvidiadriver")
    ctl = None
    recorder = None
    try:
        kube = lab.kube()
        assert lab.cli("lab", "push-image", "595-5.15.0-124-generic-ubuntu22.04").code == 0
        assert lab.kubectl("cordon", "gpu-a2").returncode == 0  # an admin's cordon, before everything
        auto = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": True}}}}
        assert lab.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p",
                           json.dumps(auto)).returncode == 0
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
        recorder = Recorder(kube).start()
        log_path = tmp_path / "controller.log"
        log = open(log_path, "w")  # noqa: SIM115
        ctl = subprocess.Popen([sys.executable, "-m", "gpualign", "controller", "--gate-operator-upgrades",
                                "--ledger-refresh", "5", "--listen", f"127.0.0.1:{free_port()}",
                                "--lease-namespace", "gpualign-system"],
                               env={**os.environ, **lab.env, "POD_NAME": "coexist"}, stdout=log,
                               stderr=subprocess.STDOUT)
        wait_for(lambda: (kube.get("/api/v1/nodes/gpu-m1")["metadata"].get("labels") or {}).get(SKIP) == "true",
                 timeout=30, what="the controller gating gpu-m1 (its image never existed)")
        assert lab.kubectl("patch", "nvidiadriver", "train", "--type", "merge", "-p",
                           json.dumps({"spec": {"version": "595"}})).returncode == 0

        def lbl(name: str) -> dict:
            return kube.get(f"/api/v1/nodes/{name}")["metadata"].get("labels") or {}

        # the operator's own walk: about 30 s on a lab alone, over 120 s with three other labs starting beside it
        wait_for(lambda: lbl("gpu-a1").get(STATE) == "upgrade-done" and lbl("gpu-a1").get(DRIVER) == "595.91.07",
                 timeout=240, what="gpu-a1 upgraded by the operator")
        assert lbl("gpu-c1").get(SKIP) == "true"
        assert lab.cli("lab", "push-image", "595-6.8.0-1015-aws-ubuntu22.04").code == 0  # mid-walk
        wait_for(lambda: all(lbl(n).get(STATE) == "upgrade-done" and lbl(n).get(DRIVER) == "595.91.07"
                             for n in TRAIN), timeout=180, what="the whole train pool upgraded")
        time.sleep(10)  # let the walk's last writes land before the quiet starts
        quiet_from = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
        events_before = kube.list_raw("/api/v1/namespaces/default/events")
        time.sleep(IDLE)
        ctl.terminate()
        ctl.wait(timeout=20)
        log.close()
        recorder.stop()

        everything = audit(lab)
        ours = node_writes(everything, "gpualign-controller/")
        operators = node_writes(everything, "gpu-operator/")
        quiet = node_writes(audit(lab, quiet_from), "gpualign-controller/")
        report = {"gpualign_node_writes": dict(ours), "operator_node_writes": dict(operators),
                  "gpualign_writes_while_idle": dict(quiet), "idle_s": IDLE}
        (tmp_path / "coexistence.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report))
        assert sum(quiet.values()) == 0, report  # nothing at all while nothing changes
        said = [line for line in log_path.read_text().splitlines() if " gated" in line or " released" in line]
        # per node: the gate arms it, holds it (its image missing), lets it in, arms it again once walked; at most
        # an alarm set + cleared
        assert max(ours.values() or [0]) <= 6, (report, said)
        for name in (*TRAIN, "gpu-b1", "gpu-m1", "gpu-r1"):
            for key, read, most in (
                    (SKIP, lambda o: ((o.get("metadata") or {}).get("labels") or {}).get(SKIP), 3),  # on, off, on
                    (GATED, lambda o: ((o.get("metadata") or {}).get("annotations") or {}).get(GATED), 2)):
                assert transitions(recorder, name, read) <= most, f"{key} flapped on {name}"
        assert not any(not (c.obj.get("spec") or {}).get("unschedulable") for c in recorder.of("node")
                       if c.name == "gpu-a2" and c.type != "DELETED"), "the admin's cordon on gpu-a2 was undone"
        events = [e for e in kube.list_raw("/api/v1/namespaces/default/events") if e.get("reason") in OURS]
        per_node = Counter(e["involvedObject"]["name"] for e in events for _ in range(int(e.get("count") or 1)))
        assert max(per_node.values() or [0]) <= 4, per_node
        new_in_quiet = [e for e in events if e["metadata"]["uid"] not in {x["metadata"]["uid"] for x in events_before}]
        assert new_in_quiet == [], new_in_quiet
        assert "Traceback" not in log_path.read_text()
    finally:
        if ctl is not None and ctl.poll() is None:
            ctl.kill()
        if recorder is not None:
            recorder.stop()
        run_cli("lab", "down", env=lab.env)
