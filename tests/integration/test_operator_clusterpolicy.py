"""Oracle: NVIDIA's real GPU Operator in ClusterPolicy mode on a mixed-OS fleet. The operator names every kernel's
image with one OS tag, taken from whichever GPU node it lists first (kernelFullVersion): gpualign must show, per node,
the image it needs and the image the operator deployed, and flag exactly the nodes where the operator's pod carries
another OS's tag. The controller raises DriverImageMismatch for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpualign.lab.processes import free_port
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.operator import check_json, operator_driver_pods, operator_paused
from tests.support.waits import wait_for

pytestmark = pytest.mark.lab

OS_TAG = {"gpu-a1": "ubuntu22.04", "gpu-a2": "ubuntu22.04", "gpu-c1": "ubuntu22.04", "gpu-b1": "ubuntu24.04",
          "gpu-m1": "ubuntu24.04", "gpu-r1": "rhel9.4"}


@pytest.fixture(scope="module")
def cplab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("op-cp") / "state", "operator-clusterpolicy")
    yield lab
    run_cli("lab", "down", env=lab.env)


def wrong_os(pod_image: str, node: str) -> bool:
    return not pod_image.endswith(f"-{OS_TAG[node]}")


def wrong_now_or_next(pod: dict, node: str) -> bool:
    """The operator runs, or on the driver's next restart would run, an image for another OS here."""
    return wrong_os(pod["image"], node) or wrong_os(pod["ds_image"] or pod["image"], node)


def settled_check(lab, tries: int = 5) -> tuple[dict, int, dict, str]:
    """The operator's driver pods and DaemonSets, and check's report, read while they stood still. In ClusterPolicy
    mode the operator may rewrite a DaemonSet's image between two reconciles (it takes the one OS tag from whichever
    GPU node it lists first, and which one that is varies from run to run): the operator is paused (SIGSTOP) while
    the test and check read, so both see the same objects. A pod still changing status (the driver simulator
    deciding it) is waited out by reading again."""
    for _ in range(tries):
        with operator_paused(lab):
            before = operator_driver_pods(lab)
            code, data, err = check_json(lab)
            after = operator_driver_pods(lab)
        if after == before:
            return before, code, data, err
        time.sleep(2)
    pytest.fail(f"the driver pods changed during each of {tries} check runs, with the operator paused")


def test_flags_exactly_the_nodes_whose_operator_pod_has_another_os_tag(cplab):
    pods, code, data, err = settled_check(cplab)
    assert set(pods) == set(OS_TAG) and {p["owner"] for p in pods.values()} == {"ClusterPolicy/cluster-policy"}
    assert code == 1
    assert "ClusterPolicy mode names every kernel's image with ONE OS tag" in err
    by_name = {n["name"]: n for n in data["nodes"]}
    for node, pod in pods.items():
        finding = by_name[node]
        assert finding["source"] == "clusterpolicy/cluster-policy"
        assert finding["operator_image"] == pod["image"]  # the image the operator chose
        assert finding["image"].endswith(f"-{finding['kernel']}-{OS_TAG[node]}")  # the image the node needs
    flagged = {n for n, f in by_name.items() if f["status"] == "operator-mismatch"}
    truth = {n for n, p in pods.items() if wrong_now_or_next(p, n)}  # a latent one too: the next restart
    # One OS tag for three OSes: at least two OS groups are wrong, whichever node the operator listed first.
    assert truth and flagged == truth
    assert data["summary"]["operator_mismatch"] == len(truth)
    for node in truth:
        wrong = pods[node]["image"] if wrong_os(pods[node]["image"], node) else pods[node]["ds_image"]
        assert wrong in by_name[node]["reason"] and by_name[node]["image"] in by_name[node]["reason"]
        if node != "gpu-m1" and wrong_os(pods[node]["image"], node):  # a wrong tag is never in the registry
            assert pods[node]["state"] in ("ImagePullBackOff", "ErrImagePull")
    # The absent image is still listed for building, even where a mismatch hides it.
    assert [m["nodes"] for m in data["missing"]] == [["gpu-m1"]]
    table = cplab.cli("check")
    assert table.code == 1 and "operator-mismatch" in table.out


def test_controller_raises_driver_image_mismatch_from_the_operators_objects(cplab):
    """Zero flags: the controller reads the ClusterPolicy, takes its repository as ledger, and posts one
    DriverImageMismatch Event per flagged node (and DriverImageMissing nowhere a mismatch hides it)."""
    kube = cplab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
    port = free_port()
    log = open(cplab.state_dir.parent / "controller-op.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "gpualign", "controller", "--listen", f"127.0.0.1:{port}",
                             "--lease-namespace", "gpualign-system", "--ledger-refresh", "5"],
                            env={**os.environ, **cplab.env, "POD_NAME": "op"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        def mismatch_events() -> set[str]:
            return {e["involvedObject"]["name"] for e in kube.list_raw("/api/v1/namespaces/default/events")
                    if e["reason"] == "DriverImageMismatch"}

        def agreed() -> set[str] | None:
            """The nodes whose operator pod or DaemonSet carries another OS's image, when the controller's
            annotations flag exactly those, read while the operator's objects stood still. The operator may pick
            its one OS tag anew on a reconcile (the controller's own node writes trigger some), so the truth is
            taken at the moment it is compared, not once at the start."""
            before = operator_driver_pods(cplab)
            truth = {n for n, p in before.items() if wrong_now_or_next(p, n)}
            flagged = {n for n in OS_TAG if ((kube.get(f"/api/v1/nodes/{n}")["metadata"].get("annotations") or {})
                                             .get("gpualign.io/driver-image-status") == "operator-mismatch")}
            return truth if truth and flagged == truth and operator_driver_pods(cplab) == before else None

        truth = wait_for(agreed, timeout=90, what="the controller's operator-mismatch annotations agreeing with "
                                                  "the operator's objects")
        assert truth <= mismatch_events()  # and each flagged node got its DriverImageMismatch Event
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
    assert proc.returncode == 0, (cplab.state_dir.parent / "controller-op.log").read_text()[-2000:]


def test_status_follows_the_operators_walk_after_a_clusterpolicy_version_change(cplab):
    """ClusterPolicy mode: driver.version 580 -> 595 with autoUpgrade on; the operator walks (into the pulls its one
    OS tag breaks). Every status row printed meanwhile agrees with the walk, and a stuck node is named with its
    image."""
    for tag in ("595-5.15.0-124-generic-ubuntu22.04", "595-6.8.0-48-generic-ubuntu24.04",
                "595-6.8.0-1015-aws-ubuntu22.04", "595-5.14.0-427.37.1.el9_4.x86_64-rhel9.4"):
        assert cplab.cli("lab", "push-image", tag).code == 0
    patch = {"spec": {"driver": {"version": "595", "upgradePolicy": {"autoUpgrade": True}}}}
    assert cplab.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(patch)
                         ).returncode == 0
    seen: list[dict] = []

    def stuck() -> dict | None:
        rows = json.loads(cplab.cli("status", "-o", "json").out)["nodes"]
        seen.extend(rows)
        return next((r for r in rows if r["state"] == "pod-restart-required"
                     and "is ImagePullBackOff: image" in (r["blocker"] or "")), None)

    # The one OS tag breaks the pulls of at least two OS groups, and a node stuck on its pull stays so: waiting for
    # one is waiting for an event, where a node passing through the walk between two polls is luck.
    wait_for(stuck, timeout=240, interval=0.3, what="a node the operator walked into a broken pull")
    for row in seen:
        if row["state"] not in ("upgrade-done", "upgrade-required", None):
            assert row["walker"] == "operator" and row["cordoned_by"] in (None, "upgrade"), row
    assert any(r["state"] not in ("upgrade-done", "upgrade-required", None) for r in seen)
    res = cplab.cli("upgrade", "--to-branch", "595", "--ledger", f"registry://{cplab.registry}/nvidia/driver",
                    "--yes")
    assert res.code == 1 and "the GPU Operator walks their driver upgrade itself" in res.err


def test_a_clusterpolicy_missing_driver_fields_gets_a_reason_per_node(cplab, tmp_path):
    """Runs last in this module (it breaks the ClusterPolicy for the operator too)."""
    patch = [{"op": "remove", "path": "/spec/driver/version"}]
    res = cplab.kubectl("patch", "clusterpolicy", "cluster-policy", "--type=json", "-p", json.dumps(patch))
    assert res.returncode == 0, res.stderr
    code, data, err = check_json(cplab)
    assert code == 1 and "Traceback" not in err
    assert {n["status"] for n in data["nodes"]} == {"unknown"}
    assert all("spec.driver.version missing" in n["reason"] for n in data["nodes"])
