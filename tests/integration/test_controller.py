"""Controller mode against a real control plane: detection within a second, clearing, restarts, failover, the
fleet board in a real browser, and the shipped manifests under their own (non-admin) ServiceAccount."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from gpualign.lab.processes import free_port
from tests.support.cli import ROOT, run_cli
from tests.support.controller import Controller, annotation, events, new_node
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def clab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("controller") / "state")
    lab.kube().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
    yield lab
    run_cli("lab", "down", env=lab.env)


def test_missing_image_alarm_within_a_second_then_cleared(clab):
    kube = clab.kube()
    ctl = Controller(clab, "--ledger-refresh", "2")
    try:
        assert ctl.metric("gpualign_missing_driver_images") == 0
        t0 = new_node(clab, "gpu-late", "5.15.0-131-generic")
        wait_for(lambda: events(kube, "gpu-late", "DriverImageMissing"), timeout=5, interval=0.02,
                 what="DriverImageMissing event")
        latency = time.monotonic() - t0
        assert latency < 1.0, f"event after {latency:.2f}s"
        assert annotation(kube, "gpu-late", "gpualign.io/driver-image-status") == "missing"
        assert annotation(kube, "gpu-late", "gpualign.io/driver-image") == "580-5.15.0-131-generic-ubuntu22.04"
        assert ctl.metric("gpualign_node_driver_image_missing",
                          'node="gpu-late",tag="580-5.15.0-131-generic-ubuntu22.04"') == 1
        assert ctl.metric("gpualign_missing_driver_images") == 1
        for other in ("gpu-a1", "gpu-b1", "gpu-e1"):  # only that node
            assert annotation(kube, other, "gpualign.io/driver-image-status") is None
            assert not events(kube, other, "DriverImageMissing")

        assert clab.cli("lab", "push-image", "580-5.15.0-131-generic-ubuntu22.04").code == 0
        pushed = time.monotonic()
        wait_for(lambda: annotation(kube, "gpu-late", "gpualign.io/driver-image-status") is None, timeout=10,
                 what="alarm cleared")
        assert annotation(kube, "gpu-late", "gpualign.io/driver-image") is None
        assert time.monotonic() - pushed < 2 + 2  # the refresh interval, plus a re-check
        assert ctl.metric("gpualign_node_driver_image_missing", 'node="gpu-late".*') is None
        assert ctl.metric("gpualign_missing_driver_images") == 0
        assert events(kube, "gpu-late", "DriverImageAvailable")
    finally:
        ctl.stop()


def test_api_server_restart_loses_and_repeats_no_event(clab):
    kube = clab.kube()
    ctl = Controller(clab, "--ledger-refresh", "2")
    try:
        new_node(clab, "gpu-before", "5.15.0-132-generic")
        wait_for(lambda: events(kube, "gpu-before", "DriverImageMissing"), timeout=5, what="first event")
        assert clab.cli("lab", "restart", "kube-apiserver", "--pause", "2").code == 0
        new_node(clab, "gpu-after", "5.15.0-133-generic")
        wait_for(lambda: events(kube, "gpu-after", "DriverImageMissing"), timeout=30, what="event after restart")
        time.sleep(4)  # let any duplicate show up
        assert len(events(kube, "gpu-before", "DriverImageMissing")) == 1
        assert len(events(kube, "gpu-after", "DriverImageMissing")) == 1
    finally:
        ctl.stop()
    # and a controller restarted from scratch does not repeat them either: the annotation is the alarm's memory
    again = Controller(clab, "--ledger-refresh", "2")
    try:
        time.sleep(3)
        assert len(events(kube, "gpu-before", "DriverImageMissing")) == 1
    finally:
        again.stop()


def test_leader_failover_within_the_lease_duration(clab):
    fast = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5", "--lease-name", "failover")
    a = Controller(clab, *fast, identity="replica-a")
    b = Controller(clab, *fast, identity="replica-b")
    try:
        wait_for(lambda: sorted([a.metric("gpualign_leader"), b.metric("gpualign_leader")]) == [0, 1],
                 what="exactly one leader")
        leader, standby = (a, b) if a.metric("gpualign_leader") == 1 else (b, a)
        leader.proc.kill()  # no clean release: the standby must wait the lease out
        killed = time.monotonic()
        wait_for(lambda: standby.metric("gpualign_leader") == 1, timeout=10, interval=0.1, what="takeover")
        assert time.monotonic() - killed < 4 + 1.5
        holder = clab.kube().get("/apis/coordination.k8s.io/v1/namespaces/gpualign-system/leases/failover")
        assert holder["spec"]["holderIdentity"] == ("replica-b" if standby is b else "replica-a")
    finally:
        a.stop()
        b.stop()


def test_fleet_board_shows_a_blocked_node_in_a_browser(clab):
    kube = clab.kube()
    kube.patch("/api/v1/nodes/gpu-b1", {"metadata": {
        "labels": {"nvidia.com/gpu-driver-upgrade-state": "pod-deletion-required"},
        "annotations": {"gpualign.io/upgrade-blocker": "eviction of ml/trainer-0 refused by PDB ml/trainer-pdb: "
                                                       "2 healthy, 2 required, 0 disruptions allowed",
                        "gpualign.io/upgrade-blocked-since": "2026-11-29T06:00:00Z"}}})
    ctl = Controller(clab)
    try:
        wait_for(lambda: "refused by PDB" in ctl.get("/api/fleet"), what="blocker in the fleet view")
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "fleet-board.png"
        shot.unlink(missing_ok=True)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={clab.state_dir.parent / 'chromium'}"]
        url = f"http://127.0.0.1:{ctl.port}/"
        dom = subprocess.run(["chromium", *flags, "--dump-dom", url], capture_output=True, text=True, timeout=60)
        assert "Blocked upgrades" in dom.stdout
        assert "gpu-b1" in dom.stdout and "refused by PDB ml/trainer-pdb" in dom.stdout
        assert "pod-deletion-required" in dom.stdout
        # in the walk and blocked: stuck, so the card is red, never a green 0 (earlier tests' nodes whose image
        # never existed have no driver: stuck too)
        stuck = re.search(r'<div class="card bad"><span>stuck nodes \(no driver, or blocked in the walk\)</span>'
                          r'<b>(\d+)</b>', dom.stdout)
        assert stuck and int(stuck.group(1)) >= 1, dom.stdout
        assert "<h2>Stuck nodes</h2>" in dom.stdout and dom.stdout.index("gpu-b1") < dom.stdout.index("Blocked")
        assert "not upgrading (" in dom.stdout and "none (" not in dom.stdout
        assert "<meta http-equiv=\"refresh\" content=\"10\">" in dom.stdout
        assert "cluster https://127.0.0.1:" in dom.stdout
        assert "href=\"/node/gpu-b1\"" in dom.stdout  # every row links to the node's page
        assert ctl.metric("gpualign_stuck_nodes") == int(stuck.group(1))
        subprocess.run(["chromium", *flags, "--window-size=1280,1000", f"--screenshot={shot}", url],
                       capture_output=True, timeout=60)
        assert shot.exists() and shot.stat().st_size > 10_000
        page = subprocess.run(["chromium", *flags, "--dump-dom", f"{url}node/gpu-b1"], capture_output=True,
                              text=True, timeout=60).stdout
        assert "gpu-b1 is in pod-deletion-required" in page and "blocked: eviction of ml/trainer-0 refused" in page
        node_shot = ARTIFACTS / "fleet-board-node.png"
        node_shot.unlink(missing_ok=True)
        subprocess.run(["chromium", *flags, "--window-size=1000,500", f"--screenshot={node_shot}",
                        f"{url}node/gpu-b1"], capture_output=True, timeout=60)
        assert node_shot.exists() and node_shot.stat().st_size > 5_000
        assert "no such GPU node" in ctl.get("/node/cpu-1")
    finally:
        ctl.stop()
        kube.patch("/api/v1/nodes/gpu-b1", {"metadata": {
            "labels": {"nvidia.com/gpu-driver-upgrade-state": None},
            "annotations": {"gpualign.io/upgrade-blocker": None, "gpualign.io/upgrade-blocked-since": None}}})


def test_shipped_manifests_apply_and_the_controller_works_as_its_serviceaccount(clab, tmp_path):
    kubectl = [str(clab.bin_dir / "kubectl"), "--kubeconfig", str(clab.kubeconfig)]
    base = str(ROOT / "deploy" / "base")
    dry = subprocess.run([*kubectl, "apply", "--dry-run=server", "-k", base], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    applied = subprocess.run([*kubectl, "apply", "-k", base], capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    token = subprocess.run([*kubectl, "create", "token", "gpualign-controller", "-n", "gpualign-system"],
                           capture_output=True, text=True, check=True).stdout.strip()
    sa_config = tmp_path / "sa-kubeconfig"
    sa_config.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n"
        f"    server: {clab.apiserver}\n    certificate-authority: {clab.state_dir / 'pki' / 'ca.crt'}\n"
        f"users:\n- name: sa\n  user:\n    token: {token}\n"
        "contexts:\n- name: sa\n  context: {cluster: lab, user: sa}\ncurrent-context: sa\n")
    ctl = Controller(clab, "--ledger-refresh", "2", kubeconfig=sa_config,  # its Role names its own Lease only
                     identity="sa-replica")
    try:
        kube = clab.kube()
        new_node(clab, "gpu-sa", "5.15.0-134-generic")
        wait_for(lambda: events(kube, "gpu-sa", "DriverImageMissing"), timeout=10, what="event as the SA")
        assert annotation(kube, "gpu-sa", "gpualign.io/driver-image-status") == "missing"
        assert ctl.metric("gpualign_leader") == 1
    finally:
        ctl.stop()
    from gpualign.kube.client import Kube

    as_sa = Kube(str(sa_config))
    assert as_sa.request("DELETE", "/api/v1/nodes/gpu-sa").status_code == 403
    assert as_sa.request("GET", "/api/v1/namespaces/gpualign-system/secrets").status_code == 403
    assert as_sa.request("GET", "/api/v1/nodes/gpu-sa").status_code == 200


def test_a_missing_lease_namespace_stops_the_controller_at_start(clab):
    res = clab.cli("controller", "--ledger", f"registry://{clab.registry}/nvidia/driver", "--driver-branch", "580",
                   "--listen", f"127.0.0.1:{free_port()}", "--lease-namespace", "no-such-namespace", timeout=60)
    assert res.code == 2, res.out + res.err
    assert ("gpualign: error: Lease no-such-namespace/gpualign-controller: namespace no-such-namespace does not "
            "exist: create it (kubectl create namespace no-such-namespace) or pass --lease-namespace") in res.err
    assert "Traceback" not in res.err


def test_a_lease_it_cannot_write_is_an_error_a_metric_and_unreadiness_never_silence(clab):
    kube = clab.kube()
    namespace = "lease-gone"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    fast = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5", "--lease-name", "gone",
            "--lease-namespace", namespace)
    ctl = Controller(clab, *fast, identity="gone-replica")
    try:
        wait_for(lambda: ctl.metric("gpualign_leader") == 1, what="leader")
        assert ctl.metric("gpualign_leader_election_failing") == 0
        assert ctl.get("/readyz") == "ok\n"

        assert clab.kubectl("delete", "namespace", namespace, "--wait=false").returncode == 0
        wait_for(lambda: ctl.metric("gpualign_leader_election_failing") == 1, timeout=30, what="failing metric")
        wait_for(lambda: ctl.metric("gpualign_leader") == 0, timeout=10, what="stepped down")
        wait_for(lambda: ctl.get("/readyz").startswith("not ready: Lease lease-gone/gone"), timeout=15,
                 what="readiness failing, with the cause")
        log = Path(ctl.log.name).read_text()
        assert re.search(r"ERROR leader election: Lease lease-gone/gone: .*cannot lead until it is fixed", log), log

        wait_for(lambda: kube.get(f"/api/v1/namespaces/{namespace}") is None, timeout=60, what="namespace gone")
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        wait_for(lambda: ctl.metric("gpualign_leader") == 1, timeout=15, what="leader again")
        assert ctl.metric("gpualign_leader_election_failing") == 0
        wait_for(lambda: ctl.get("/readyz") == "ok\n", what="ready again")
        assert "readable and writable again" in Path(ctl.log.name).read_text()
    finally:
        ctl.stop()
    shutdown = Path(ctl.log.name).read_text().rsplit("became the leader", 1)[-1]  # after the last election
    assert "gone-replica: released the lease" in shutdown and "lost the lease" not in shutdown, shutdown


def test_a_driver_pod_waiting_for_its_image_pulls_as_soon_as_the_image_is_there(tmp_path):
    """Pulls retried as a kubelet retries them (10 s, then 20 s, ...): the pod of a node whose image is pushed
    after two failed pulls would wait ~19 s more; the controller restarts it, and it is Ready within seconds."""
    lab = start_lab(tmp_path / "state", env={"GPUALIGN_LAB_PULL_BACKOFF": "kubelet"})
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
    ctl = Controller(lab, "--ledger-refresh", "2", "--restart-waiting-driver-pods")
    tag = "580-5.15.0-131-generic-ubuntu22.04"

    def driver_pod() -> dict | None:
        pods = [p for p in kube.list_raw("/api/v1/namespaces/gpu-operator/pods")
                if p["spec"].get("nodeName") == "gpu-late" and not p["metadata"].get("deletionTimestamp")]
        return pods[0] if pods else None

    def waiting() -> bool:
        pod = driver_pod()
        return bool(pod) and "ImagePullBackOff" in str(pod.get("status"))

    try:
        new_node(lab, "gpu-late", "5.15.0-131-generic")
        wait_for(waiting, timeout=30, what="the driver pod in ImagePullBackOff")
        first = driver_pod()
        assert first is not None
        failed_at = failed_pull_time(first)
        wait_for(lambda: (p := driver_pod()) is not None and p["metadata"]["uid"] == first["metadata"]["uid"]
                 and failed_pull_time(p) not in ("", failed_at),
                 timeout=25, interval=0.2, what="the second failed pull")  # the next is 20 s after it
        assert clab_push(lab, tag)
        pushed = time.monotonic()
        wait_for(lambda: (p := driver_pod()) is not None and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []),
            timeout=30, interval=0.2, what="the driver pod Ready")
        took = time.monotonic() - pushed
        assert took < 8, f"Ready {took:.1f}s after the push: the kubelet's back-off was waited out"
        assert driver_pod()["metadata"]["uid"] != first["metadata"]["uid"]  # its DaemonSet's new pod
        assert events(kube, "gpu-late", "DriverPodRestarted")
    finally:
        ctl.stop()
        run_cli("lab", "down", env=lab.env)


def failed_pull_time(pod: dict) -> str:
    """When the pod's last pull failed, as its Ready condition records it ('' when none)."""
    return next((c.get("lastTransitionTime", "") for c in (pod.get("status") or {}).get("conditions") or []
                 if c["type"] == "Ready" and c["status"] == "False"), "")


def clab_push(lab, tag: str) -> bool:
    return lab.cli("lab", "push-image", tag).code == 0
