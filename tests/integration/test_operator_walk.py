"""Beside NVIDIA's real GPU Operator walking its own driver upgrade (autoUpgrade on, NVIDIADriver mode): gpualign's
gate keeps it off a node whose new image is missing; without the gate it drains that node into a failed pull;
`status` / `why` describe its walk, a PDB refusal and a failure; `gpualign upgrade` refuses to be a second walker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpualign.lab.processes import free_port
from tests.recorder import STATE, Recorder
from tests.support.cli import run_cli
from tests.support.controller import events
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

SKIP = "nvidia.com/gpu-driver-upgrade.skip"
GATED = "gpualign.io/upgrade-gated"
ARMED = "gpualign.io/upgrade-armed"
DRIVER = "nvidia.com/cuda.driver-version.full"
TRAIN = ("gpu-a1", "gpu-a2", "gpu-c1")


@pytest.fixture
def wlab(tmp_path):
    lab = start_lab(tmp_path / "state", "operator-nvidiadriver")
    assert lab.cli("lab", "push-image", "595-5.15.0-124-generic-ubuntu22.04").code == 0  # gpu-c1's stays missing
    auto = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": True}}}}
    assert lab.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(auto)
                       ).returncode == 0
    yield lab
    run_cli("lab", "down", env=lab.env)


def node(lab, name: str) -> dict:
    return lab.kube().get(f"/api/v1/nodes/{name}")


def labels(lab, name: str) -> dict:
    return node(lab, name)["metadata"].get("labels") or {}


def to_595(lab, pool: str = "train") -> None:
    patch = json.dumps({"spec": {"version": "595"}})
    assert lab.kubectl("patch", "nvidiadriver", pool, "--type", "merge", "-p", patch).returncode == 0


def walked_to_595(lab, names: tuple[str, ...], timeout: float, what: str) -> None:
    wait_for(lambda: all(labels(lab, n).get(DRIVER) == "595.91.07" and labels(lab, n).get(STATE) == "upgrade-done"
                         for n in names), timeout=timeout, what=what)


def ever_cordoned(recorder: Recorder, name: str) -> bool:
    return any((c.obj.get("spec") or {}).get("unschedulable") for c in recorder.of("node") if c.name == name)


class Controller:
    def __init__(self, lab, *extra: str) -> None:
        lab.kube().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
        self.log_path = lab.state_dir.parent / "controller-gate.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpualign", "controller", "--listen", f"127.0.0.1:{self.port}",
             "--lease-namespace", "gpualign-system", "--ledger-refresh", "2", *extra],
            env={**os.environ, **lab.env, "POD_NAME": "gate"}, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()
        return self.log_path.read_text()


@pytest.mark.timeout(300)
def test_the_gate_holds_the_operator_off_a_node_whose_image_is_missing(wlab):
    kube = wlab.kube()
    recorder = Recorder(kube).start()
    # An admin's own hold, set before the gate arms the node (on an armed node the label is the gate's: remove its
    # gpualign.io/upgrade-armed mark to make it yours)
    assert wlab.kubectl("label", "node", "gpu-r1", f"{SKIP}=true").returncode == 0
    ctl = Controller(wlab, "--gate-operator-upgrades")
    try:
        # gpu-m1 (infer, image never pushed) is gated as soon as the controller has looked
        wait_for(lambda: labels(wlab, "gpu-m1").get(SKIP) == "true", timeout=30, what="gpu-m1 gated")
        to_595(wlab)
        walked_to_595(wlab, ("gpu-a1", "gpu-a2"), 90, "the operator upgrading the nodes whose image exists")
        c1 = node(wlab, "gpu-c1")
        assert c1["metadata"]["labels"].get(SKIP) == "true"
        assert "595-6.8.0-1015-aws-ubuntu22.04 missing" in c1["metadata"]["annotations"][GATED]
        assert c1["metadata"]["labels"][DRIVER] == "580.173.02"  # keeps its old driver
        why = wlab.cli("why", "gpu-c1")
        assert "skipped: the node carries nvidia.com/gpu-driver-upgrade.skip=true (gpualign's gate set it" in why.out

        # No two walkers: gpualign's own walk refuses these nodes, before writing anything.
        ledger = f"registry://{wlab.registry}/nvidia/driver"
        refused = wlab.cli("upgrade", "-l", "pool=train", "--to-branch", "595", "--ledger", ledger, "--yes")
        assert refused.code == 1
        assert "ClusterPolicy cluster-policy has spec.driver.upgradePolicy.autoUpgrade: true" in refused.err
        assert "Traceback" not in refused.err and refused.err.startswith("gpualign: refused: ")
        # beside the operator no ledger is needed to learn that: the same refusal, as check needs none either
        bare = wlab.cli("upgrade", "-l", "pool=train", "--to-branch", "595", "--yes")
        assert bare.code == 1 and bare.err == refused.err, bare.err
        assert kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpualign-upgrade") is None

        # Someone else's skip label is left alone, and never claimed.
        to_595(wlab, "rhel")  # its 595 image is missing too
        wait_for(lambda: "node gpu-r1: its skip label was set by someone else" in ctl.log_path.read_text(),
                 timeout=30, what="the gate looking at gpu-r1 with its image missing")
        assert "set by someone else: gpualign leaves it" in wlab.cli("why", "gpu-r1").out
        assert GATED not in (node(wlab, "gpu-r1")["metadata"].get("annotations") or {})

        # The image arrives: the gate lifts its own label and the operator upgrades the node.
        assert wlab.cli("lab", "push-image", "595-6.8.0-1015-aws-ubuntu22.04").code == 0
        assert wlab.cli("lab", "push-image", "595-5.14.0-427.37.1.el9_4.x86_64-rhel9.4").code == 0
        wait_for(lambda: labels(wlab, "gpu-c1").get(STATE) == "upgrade-done"
                 and labels(wlab, "gpu-c1").get(DRIVER) == "595.91.07", timeout=90, what="gpu-c1 upgraded")
        # walked, it is armed again for the next upgrade: held until the gate has judged that one too
        wait_for(lambda: ARMED in (node(wlab, "gpu-c1")["metadata"].get("annotations") or {}), timeout=30,
                 what="gpu-c1 armed again")
        assert labels(wlab, "gpu-c1").get(SKIP) == "true"
        assert GATED not in (node(wlab, "gpu-c1")["metadata"].get("annotations") or {})
        assert labels(wlab, "gpu-r1").get(SKIP) == "true"  # the admin's label stays
        assert labels(wlab, "gpu-r1").get(DRIVER) == "580.173.02"
    finally:
        log = ctl.stop()
        recorder.stop()
    assert not ever_cordoned(recorder, "gpu-c1") or _cordoned_only_after_release(recorder), log[-2000:]
    assert not ever_cordoned(recorder, "gpu-r1")
    assert "Traceback" not in log


def _cordoned_only_after_release(recorder: Recorder) -> bool:
    """gpu-c1 may be cordoned only once its skip label is gone (the operator's own walk after the image arrived)."""
    released = False
    for c in recorder.of("node"):
        if c.name != "gpu-c1":
            continue
        labels_now = (c.obj.get("metadata") or {}).get("labels") or {}
        released = released or SKIP not in labels_now
        if (c.obj.get("spec") or {}).get("unschedulable") and not released:
            return False
    return True


@pytest.mark.timeout(300)
def test_without_the_gate_the_operator_drains_into_a_failed_pull_and_status_says_so(wlab):
    kube = wlab.kube()
    recorder = Recorder(kube).start()
    seen: list[dict] = []
    try:
        to_595(wlab)

        def stuck() -> bool:
            rows = json.loads(wlab.cli("status", "-l", "pool=train", "-o", "json").out)["nodes"]
            seen.extend(rows)
            c1 = next(r for r in rows if r["name"] == "gpu-c1")
            return c1["state"] == "pod-restart-required" and "ImagePullBackOff" in (c1["blocker"] or "")

        wait_for(stuck, timeout=120, interval=0.3, what="gpu-c1 cordoned and stuck on a pull it cannot make")
    finally:
        recorder.stop()
    c1 = next(r for r in reversed(seen) if r["name"] == "gpu-c1")
    assert (c1["walker"], c1["cordoned"], c1["cordoned_by"]) == ("operator", True, "upgrade")
    assert "new driver pod gpu-operator/" in c1["blocker"]
    assert "595-6.8.0-1015-aws-ubuntu22.04" in c1["blocker"]
    assert ever_cordoned(recorder, "gpu-c1") and labels(wlab, "gpu-c1")[DRIVER] == "580.173.02"
    why = wlab.cli("why", "gpu-c1").out
    assert "gpu-c1 is in pod-restart-required, walked by the GPU Operator's upgrade controller" in why
    assert "cordoned by the upgrade" in why and "ImagePullBackOff" in why
    # Every row status printed during the walk agrees with the walk: the operator cordoned, nobody else.
    for row in seen:
        if row["state"] not in ("upgrade-done", "upgrade-required", None):
            assert row["walker"] == "operator", row
            assert row["cordoned_by"] in (None, "upgrade"), row
    # The walk really went through its states (the recorder saw every change of gpu-c1), and status was read while
    # the node was in the walk: how many of the states a poll catches depends on how fast the operator moves.
    walked = {((c.obj.get("metadata") or {}).get("labels") or {}).get(STATE) for c in recorder.of("node")
              if c.name == "gpu-c1"}
    assert {"upgrade-required", "cordon-required", "pod-restart-required"} <= walked, walked
    assert any(r["state"] == "pod-restart-required" for r in seen if r["name"] == "gpu-c1")


@pytest.mark.timeout(300)
def test_a_pdb_refusal_and_the_operators_failure_are_named(wlab, tmp_path):
    kube = wlab.kube()
    policy = {"spec": {"driver": {"upgradePolicy": {"podDeletion": {"timeoutSeconds": 8}}}}}
    assert wlab.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(policy)
                        ).returncode == 0
    assert wlab.cli("lab", "push-image", "595-6.8.0-1015-aws-ubuntu22.04").code == 0
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "held", "namespace": "ml"},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "held"}}, "template": {
             "metadata": {"labels": {"app": "held"}},
             "spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-a1"}, "containers": [{
                 "name": "t", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "held-pdb", "namespace": "ml"},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}},
    ]
    for m in manifests:
        path = tmp_path / f"{m['kind']}.json"
        path.write_text(json.dumps(m))
        assert wlab.kubectl("apply", "-f", str(path)).returncode == 0
    wait_for(lambda: (kube.get("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/held-pdb") or {})
             .get("status", {}).get("currentHealthy") == 1, timeout=60, what="the PDB counting its pod")
    to_595(wlab)

    def row() -> dict:
        return next(r for r in json.loads(wlab.cli("status", "-l", "pool=train", "-o", "json").out)["nodes"]
                    if r["name"] == "gpu-a1")

    refusing = wait_for(lambda: (r := row())["state"] == "pod-deletion-required" and r["blocker"] and r,
                        timeout=120, interval=0.3, what="gpu-a1 in pod deletion, refused")
    assert "refused by PDB ml/held-pdb: 1 healthy, 1 required, 0 disruptions allowed" in refusing["blocker"]
    assert refusing["walker"] == "operator" and refusing["cordoned_by"] == "upgrade"
    failed = wait_for(lambda: (r := row())["state"] == "upgrade-failed" and r, timeout=120, what="upgrade-failed")
    assert failed["blocker"].startswith("the GPU Operator failed it: Failed to delete workload pods")
    status = wlab.cli("status", "-l", "pool=train")
    assert status.code == 1 and "upgrade-failed" in status.out
    why = wlab.cli("why", "gpu-a1").out
    assert "gpu-a1 is in upgrade-failed, walked by the GPU Operator's upgrade controller" in why
    assert "leaves upgrade-failed by itself once the node's driver pod is in sync and Ready" in why


def apply_all(lab, tmp_path, manifests: list[dict]) -> None:
    for m in manifests:
        path = tmp_path / f"{m['kind']}-{m['metadata']['name']}.json"
        path.write_text(json.dumps(m))
        assert lab.kubectl("apply", "-f", str(path)).returncode == 0


def trainer(name: str, node_name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node_name}, "containers": [{
                    "name": "t", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def budget(name: str, app: str, **spec: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ml"},
            "spec": {**spec, "selector": {"matchLabels": {"app": app}}}}


@pytest.mark.timeout(300)
def test_the_gate_keeps_the_operator_off_a_node_a_strict_pdb_guards_and_lets_it_in_once_the_pdb_allows(
        wlab, tmp_path):
    """The seed's half-state, beside the operator: without the gate it cordons gpu-a1 and leaves it in pod deletion
    (the test above). With the gate, the node whose PDB allows no disruption is never cordoned and keeps its driver,
    the node whose PDB allows one is walked at once, and the held one is walked once its PDB allows."""
    kube = wlab.kube()
    assert wlab.cli("lab", "push-image", "595-6.8.0-1015-aws-ubuntu22.04").code == 0
    apply_all(wlab, tmp_path, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
                               trainer("strict", "gpu-a1"), budget("strict-pdb", "strict", minAvailable=1),
                               trainer("loose", "gpu-a2"), budget("loose-pdb", "loose", maxUnavailable=1)])
    for name in ("strict-pdb", "loose-pdb"):
        wait_for(lambda name=name: (kube.get(f"/apis/policy/v1/namespaces/ml/poddisruptionbudgets/{name}") or {})
                 .get("status", {}).get("currentHealthy") == 1, timeout=60, what=f"{name} counting its pod")
    recorder = Recorder(kube).start()
    ctl = Controller(wlab, "--gate-operator-upgrades")
    try:
        wait_for(lambda: all(ARMED in (node(wlab, n)["metadata"].get("annotations") or {}) for n in TRAIN),
                 timeout=30, what="the train pool armed")
        to_595(wlab)
        walked_to_595(wlab, ("gpu-a2", "gpu-c1"), 120, "the operator walking the nodes whose pods may leave")
        a1 = node(wlab, "gpu-a1")
        assert a1["metadata"]["labels"].get(STATE) == "upgrade-required"
        assert a1["metadata"]["labels"].get(SKIP) == "true" and a1["metadata"]["labels"][DRIVER] == "580.173.02"
        assert "PDB ml/strict-pdb allows 0 disruptions" in a1["metadata"]["annotations"][GATED]
        assert any("PDB ml/strict-pdb" in e["message"] for e in events(kube, "gpu-a1", "DriverUpgradeGated"))
        why = wlab.cli("why", "gpu-a1").out
        assert "gpualign's gate set it: waiting before cordon: PDB ml/strict-pdb allows 0" in why, why
        status = wlab.cli("status", "-l", "kubernetes.io/hostname=gpu-a1")
        assert "ml/strict-pdb" in status.out, status.out
        listed = json.loads(wlab.cli("gate", "list", "-o", "json").out)["nodes"]
        assert {r["node"]: r["state"] for r in listed}["gpu-a1"] == "held"

        # The training job's owner lets one pod go: the gate lets gpu-a1 in, and the operator walks it.
        patch = json.dumps({"spec": {"minAvailable": 0}})
        assert wlab.kubectl("-n", "ml", "patch", "pdb", "strict-pdb", "--type", "merge", "-p", patch).returncode == 0
        wait_for(lambda: labels(wlab, "gpu-a1").get(STATE) == "upgrade-done"
                 and labels(wlab, "gpu-a1").get(DRIVER) == "595.91.07", timeout=120, what="gpu-a1 walked")
    finally:
        log = ctl.stop()
        recorder.stop()
    assert ever_cordoned(recorder, "gpu-a2"), "the loose node was walked"
    cordoned_held = [c for c in recorder.of("node") if c.name == "gpu-a1" and (c.obj.get("spec") or {}).get(
        "unschedulable") and ((c.obj.get("metadata") or {}).get("labels") or {}).get(SKIP) == "true"]
    assert not cordoned_held, "gpu-a1 was cordoned while the gate held it"
    assert "Traceback" not in log


@pytest.mark.timeout(300)
def test_the_gates_labels_never_outlive_the_gate_and_an_admins_label_survives_it_all(wlab):
    kube = wlab.kube()
    assert wlab.kubectl("label", "node", "gpu-b1", f"{SKIP}=true").returncode == 0  # an admin's own hold
    ctl = Controller(wlab, "--gate-operator-upgrades", "--gate-warn-after", "3")
    try:
        wait_for(lambda: labels(wlab, "gpu-m1").get(SKIP) == "true", timeout=30, what="gpu-m1 gated")
        assert GATED in node(wlab, "gpu-m1")["metadata"]["annotations"]
        status = wlab.cli("status", "-l", "kubernetes.io/hostname=gpu-m1")  # the view people watch shows the gate
        assert "gated: image " in status.out and "gated: 1" in status.out, status.out
        # a hold older than --gate-warn-after is not forgotten: one warning Event
        wait_for(lambda: events(kube, "gpu-m1", "DriverUpgradeGatedLong"), timeout=30, what="held-too-long Event")
        time.sleep(3)
        assert len(events(kube, "gpu-m1", "DriverUpgradeGatedLong")) == 1  # once per hold
    finally:
        ctl.stop()
    assert labels(wlab, "gpu-m1").get(SKIP) == "true"  # stopping the controller alone leaves the hold in place

    # restarted without the gate: it lets go of every node it held, with an Event, and of nothing else
    plain = Controller(wlab)
    try:
        wait_for(lambda: SKIP not in labels(wlab, "gpu-m1"), timeout=30, what="gpu-m1 released")
        assert GATED not in (node(wlab, "gpu-m1")["metadata"].get("annotations") or {})
        wait_for(lambda: events(kube, "gpu-m1", "DriverUpgradeReleased"), what="the release Event")
        assert "the gate is off" in events(kube, "gpu-m1", "DriverUpgradeReleased")[-1]["message"]
    finally:
        log = plain.stop()
    assert "gpu-m1 released: the gate is off" in log
    assert labels(wlab, "gpu-b1").get(SKIP) == "true"  # the admin's label: untouched

    # gated again, then released by the command the Helm chart's uninstall hook runs (no controller needed)
    ctl = Controller(wlab, "--gate-operator-upgrades")
    try:
        wait_for(lambda: labels(wlab, "gpu-m1").get(SKIP) == "true", timeout=30, what="gpu-m1 gated again")
    finally:
        ctl.stop()
    listed = wlab.cli("gate", "list", "-o", "json")  # the review's #21: which nodes are held, without a dry run
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)["nodes"]
    assert [(n["node"], n["why"].startswith("target image")) for n in rows if n["state"] == "held"] == \
        [("gpu-m1", True)]
    armed = sorted(n["node"] for n in rows if n["state"] == "armed")  # every other node the operator drives
    assert "gpu-a1" in armed and "gpu-b1" not in armed, rows  # gpu-b1's label is the admin's
    assert "gpu-m1" in wlab.cli("gate", "list").out
    dry = wlab.cli("gate", "release", "--dry-run")
    assert dry.code == 0 and "would release gpu-m1 (held: target image" in dry.out and "gpu-b1" not in dry.out
    assert labels(wlab, "gpu-m1").get(SKIP) == "true"
    res = wlab.cli("gate", "release")
    assert res.code == 0 and "released gpu-m1" in res.out, res.out + res.err
    assert f"{len(rows)} node(s) released" in res.out, res.out
    assert all(SKIP not in labels(wlab, n) for n in armed)
    assert SKIP not in labels(wlab, "gpu-m1") and labels(wlab, "gpu-b1").get(SKIP) == "true"
    assert wlab.cli("gate", "release").out.strip() == "the gate holds no node"
    assert wlab.cli("gate", "list").out.strip() == "the gate holds no node"


@pytest.mark.timeout(300)
def test_a_new_nvidiadriver_naming_a_new_repository_is_read_at_once_and_a_wrong_image_is_alarmed_and_gated(wlab):
    """An NVIDIADriver made while the controller runs names a repository it has never read: the node it selects is
    checked against that repository at once, with no false "missing" Event, annotation or gate hold. An image there
    whose own labels name another kernel is alarmed as wrong (Event, annotation, metric) and gated."""
    import httpx2

    from gpualign.ledger.references import RegistryRef
    from gpualign.ledger.registry import RegistryClient

    kube = wlab.kube()
    host, port = wlab.registry.rsplit(":", 1)
    reg = RegistryClient(RegistryRef(f"{host}:{port}", "second/driver", "http"))
    good, wrong = "580-6.8.0-48-generic-ubuntu24.04", "580-6.8.0-49-generic-ubuntu24.04"
    reg.push_image(good, {"DRIVER_VERSION": "580.173.02"}, labels={"version": "580-6.8.0-48-generic"})
    reg.push_image(wrong, {"DRIVER_VERSION": "580.173.02"}, labels={"version": "580-6.8.0-48-generic"})
    reg.close()
    ctl = Controller(wlab, "--gate-operator-upgrades")
    try:
        wait_for(lambda: labels(wlab, "gpu-m1").get(SKIP) == "true", timeout=30, what="the controller at work")
        manifest = wlab.state_dir.parent / "second.json"
        manifest.write_text(json.dumps(
            {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "second"},
             "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": f"{wlab.registry}/second",
                      "image": "driver", "version": "580", "nodeSelector": {"pool": "second"},
                      "manager": {"repository": f"{wlab.registry}/nvidia", "image": "k8s-driver-manager",
                                  "version": "v0.8.1"}}}))
        wlab.kubectl("apply", "-f", str(manifest), check=True)
        for name, kernel in (("gpu-s1", "6.8.0-48-generic"), ("gpu-s2", "6.8.0-49-generic")):
            assert wlab.cli("lab", "add-node", name, "--kernel", kernel, "--os", "ubuntu24.04",
                            "--label", "pool=second").code == 0
        wait_for(lambda: events(kube, "gpu-s2", "DriverImageWrong"), timeout=60, what="gpu-s2's wrong-image Event")
        (event,) = events(kube, "gpu-s2", "DriverImageWrong")
        assert f"second/driver:{wrong} is in the ledger but present but wrong: its label version=" in event["message"]
        assert f"gpualign ensure {wrong} --replace-wrong" in event["message"]
        s2 = node(wlab, "gpu-s2")
        assert s2["metadata"]["annotations"]["gpualign.io/driver-image-status"] == "wrong-image"
        wait_for(lambda: labels(wlab, "gpu-s2").get(SKIP) == "true", timeout=30, what="gpu-s2 gated")
        assert "present but wrong" in node(wlab, "gpu-s2")["metadata"]["annotations"][GATED]
        metrics = httpx2.get(f"http://127.0.0.1:{ctl.port}/metrics").text
        assert "gpualign_wrong_driver_images 1.0" in metrics, metrics
        time.sleep(5)  # past two ledger refreshes: gpu-s1's image was in the new repository all along
        assert not events(kube, "gpu-s1", "DriverImageMissing") and not events(kube, "gpu-s1", "DriverUpgradeGated")
        s1 = node(wlab, "gpu-s1")  # armed (no upgrade asked of it), never held
        assert (s1["metadata"].get("labels") or {}).get(SKIP) == "true"
        assert ARMED in s1["metadata"]["annotations"] and GATED not in s1["metadata"]["annotations"]
        assert "gpualign.io/driver-image-status" not in (s1["metadata"].get("annotations") or {})
    finally:
        log = ctl.stop()
    assert "node gpu-s1 needs driver image" not in log and "Traceback" not in log, log[-3000:]
