"""`lab up` failures are one clear line and leave no stray processes; `lab down` cleans up after a crash."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from gpualign.lab import versions
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = pytest.mark.lab


def _our_processes(state_dir: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", str(state_dir)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def _bin_dir_with(tmp_path: Path, replace: dict[str, str | None]) -> Path:
    """A copy of the real bin dir (symlinks), with some binaries replaced by scripts or removed."""
    real = versions.default_bin_dir()
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in versions.ALL_BINARIES:
        if name in replace:
            if replace[name] is not None:
                (bins / name).write_text(replace[name])
                (bins / name).chmod(0o755)
        else:
            (bins / name).symlink_to(real / name)
    return bins


def _up(state_dir: Path, bins: Path, *extra: str):
    return run_cli("lab", "up", "--scenario", "empty", *extra,
                   env={"GPUALIGN_LAB_DIR": str(state_dir), "GPUALIGN_LAB_BIN": str(bins)}, timeout=180)


def test_missing_binary_is_one_line(tmp_path):
    bins = _bin_dir_with(tmp_path, {"kube-scheduler": None})
    res = _up(tmp_path / "state", bins)
    assert res.code == 2
    assert res.err.strip() == (f"gpualign: error: kube-scheduler not found in {bins}: "
                               "run `gpualign lab build` first")
    assert not _our_processes(tmp_path / "state")


def test_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = _up(tmp_path / "state", versions.default_bin_dir(), "--apiserver-port", str(port))
    assert res.code == 2
    assert res.err.strip() == (f"gpualign: error: port 127.0.0.1:{port} (kube-apiserver) is already in use: "
                               "pick another or use 0 for any")
    assert not _our_processes(tmp_path / "state")


def test_component_dying_at_start_shows_its_log_tail_and_stops_the_rest(tmp_path):
    crash = "#!/bin/sh\necho 'E1129 scheduler: simulated crash: cannot load config'\nexit 1\n"
    bins = _bin_dir_with(tmp_path, {"kube-scheduler": crash})
    state = tmp_path / "state"
    res = _up(state, bins)
    assert res.code == 2
    lines = [ln for ln in res.err.strip().splitlines() if not ln.startswith("... ")]  # drop progress lines
    first, *rest = lines
    assert first.startswith("gpualign: error: kube-scheduler exited at start; log: ")
    assert "simulated crash: cannot load config" in "\n".join(rest)
    assert not _our_processes(state)  # etcd, apiserver and controller-manager were started, then stopped


def test_down_after_a_crash_still_cleans_up(tmp_path):
    state = tmp_path / "state"
    lab = start_lab(state, scenario="empty")
    from gpualign.lab.cluster import LabState

    procs = LabState.load(state).procs
    os.kill(procs["kube-apiserver"].pid, signal.SIGKILL)
    wait_for(lambda: not procs["kube-apiserver"].alive(), what="apiserver dead")
    status = run_cli("lab", "status", env=lab.env)
    assert status.code == 1
    assert "DEAD" in status.out
    down = run_cli("lab", "down", env=lab.env)
    assert down.code == 0
    assert not _our_processes(state)
    assert not state.exists()
    again = run_cli("lab", "down", env=lab.env)
    assert again.code == 0 and "nothing was running" in again.err


def test_the_lab_survives_everyday_events_and_a_dead_component_is_brought_back_not_wiped(tmp_path):
    """Deleting a GPU node (and its driver pod's namespace) does not kill the driver simulator; a component that
    does die leaves `lab env` usable and `lab up` pointing at `lab restart COMPONENT`, which brings it back with the
    cluster intact."""
    from gpualign.lab.cluster import LabState

    state = tmp_path / "state"
    lab = start_lab(state)
    kube = lab.kube()
    procs = LabState.load(state).procs
    assert lab.kubectl("delete", "node", "gpu-a2", "--wait=false").returncode == 0
    assert lab.kubectl("delete", "namespace", "ml", "--wait=false").returncode == 0
    assert lab.cli("lab", "add-node", "gpu-new", "--kernel", "5.15.0-124-generic", "--os", "ubuntu22.04").code == 0

    def driver_ready_on(node: str):
        return next((p for p in kube.pods(label_selector="app.kubernetes.io/component=nvidia-driver")
                     if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"), None)

    wait_for(lambda: driver_ready_on("gpu-new"), timeout=60, what="gpu-new's driver pod Running")
    assert procs["driver-sim"].alive() and lab.cli("lab", "status").code == 0  # still there, still serving

    os.kill(procs["driver-sim"].pid, signal.SIGKILL)
    wait_for(lambda: not procs["driver-sim"].alive(), what="driver-sim dead")
    env = lab.cli("lab", "env")
    assert env.code == 0 and f"export KUBECONFIG={lab.kubeconfig}" in env.out, env.err
    assert "driver-sim not running" in env.err and "gpualign lab restart driver-sim" in env.err
    up = run_cli("lab", "up", env=lab.env, timeout=60)
    assert up.code == 2 and "`gpualign lab restart driver-sim`" in up.err, up.err
    assert kube.get("/api/v1/nodes/gpu-new") is not None  # nothing wiped
    assert lab.cli("lab", "restart", "driver-sim").code == 0
    assert lab.cli("lab", "status").code == 0
    run_cli("lab", "down", env=lab.env)


def _up_on_a_taken_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: str, port: int):  # noqa: ANN202
    """A lab brought up in this process with `role`'s port chosen as `port` (one something else holds): its state
    and what it said while starting."""
    from gpualign.lab import cluster

    claim = cluster._claim_ports
    monkeypatch.setattr(cluster, "_claim_ports", lambda wanted: {**claim(wanted), role: port})
    said: list[str] = []
    state = cluster.up(tmp_path / "state", versions.default_bin_dir(), real_node=False, progress=said.append)
    return state, said


def test_an_api_server_port_taken_after_it_was_chosen_is_chosen_again(tmp_path, monkeypatch):
    """Another lab starting beside this one can take the port chosen for the API server before it binds it: the
    lab chooses again, once, and its kubeconfigs name the port it got."""
    from gpualign.kube.client import Kube
    from gpualign.lab import cluster

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state, said = _up_on_a_taken_port(tmp_path, monkeypatch, "kube-apiserver", port)
    try:
        assert "kube-apiserver's port was taken meanwhile; retrying once on a new port" in said
        assert state.apiserver != f"https://127.0.0.1:{port}"
        assert state.apiserver in (tmp_path / "state" / "kubeconfig").read_text()
        kube = Kube(str(tmp_path / "state" / "kubeconfig"))
        try:
            assert kube.get_json("/version")["major"] == "1"
        finally:
            kube.close()
    finally:
        cluster.down(tmp_path / "state")
    assert not _our_processes(tmp_path / "state")


def test_a_scheduler_port_another_server_answers_on_is_chosen_again(tmp_path, monkeypatch):
    """A lab starting beside this one can bind the port chosen for this lab's kube-scheduler first, and its
    scheduler then answers /healthz there. That answer is not this lab's scheduler: the lab starts its own once more
    on a new port, and the scheduler it records is running and is the one listening."""
    from gpualign.lab import cluster, processes
    from gpualign.lab import pki as pkimod
    from tests.tag_server import tag_server

    foreign = pkimod.create(tmp_path / "foreign-pki")
    with tag_server(cert=(foreign.serving_cert, foreign.serving_key)) as (port, _asked):  # 200 to every GET
        state, said = _up_on_a_taken_port(tmp_path, monkeypatch, "kube-scheduler", port)
        try:
            assert "kube-scheduler's port was taken meanwhile; retrying once on a new port" in said
            scheduler = state.procs["kube-scheduler"]
            assert scheduler.argv is not None
            now = int(scheduler.argv[scheduler.argv.index("--secure-port") + 1])
            assert now != port and scheduler.alive() and processes.listens_on(scheduler.pid, now)
            assert scheduler.address == f"https://127.0.0.1:{now}"  # where `lab status` says it serves
        finally:
            cluster.down(tmp_path / "state")
    assert not _our_processes(tmp_path / "state")
