"""The lab's real node (kubelet, containerd, runc): a Job really runs, gpualign's chart really runs its controller
and its uninstall hook there, and kwok keeps its hands off the node — proven from the API server's audit log."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from ruamel.yaml import YAML

from gpualign.lab import realnode, versions
from tests.support.cli import ROOT, run_cli
from tests.support.lab import Lab, start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
CHART = ROOT / "charts" / "gpualign"
NS = realnode.NAMESPACE
ON_THE_NODE = {"nodeSelector": {realnode.LABEL: "true"},
               "tolerations": [{"key": realnode.LABEL, "operator": "Exists", "effect": "NoSchedule"}]}


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    state_dir = tmp_path_factory.mktemp("reallab") / "state"
    instance = start_lab(state_dir, real_node=True)
    try:
        yield instance
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})


@pytest.fixture(scope="module")
def image(real_lab: Lab) -> str:
    res = real_lab.cli("lab", "push-self", timeout=300)
    assert res.code == 0, res.err
    return res.out.strip()


def helm(lab: Lab, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(versions.helm_binary()), *args, "--kubeconfig", str(lab.kubeconfig)],
                          capture_output=True, text=True, timeout=240)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc


def condition(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions", []))


def test_a_job_completes_only_after_its_container_really_ran(real_lab, image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "proof", "namespace": NS},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               **ON_THE_NODE, "restartPolicy": "Never",
               "securityContext": {"runAsUser": 0},
               "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}],
               "containers": [{"name": "c", "image": image, "command": ["sh", "-c"],
                               "args": ["sleep 4; echo \"ran in $(hostname)\" > /out/result"],
                               "volumeMounts": [{"name": "out", "mountPath": "/out"}]}]}}}}
    kube = real_lab.kube()
    started = time.monotonic()
    assert kube.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body=job).status_code == 201
    done = wait_for(lambda: (j := kube.get(f"/apis/batch/v1/namespaces/{NS}/jobs/proof")) and condition(j, "Complete")
                    and j, timeout=120, interval=0.2)
    took = time.monotonic() - started
    # The Job controller reported Complete only after the container's own 4 s: kwok would have faked it at once.
    assert took >= 4.0, took
    assert (out / "result").read_text().startswith("ran in proof-")
    pod = kube.get_json(f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": "job-name=proof"})["items"][0]
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 0 and state["reason"] == "Completed"
    assert pod["spec"]["nodeName"] == realnode.NAME and done["status"]["succeeded"] == 1
    logs = real_lab.kubectl("logs", "-n", NS, pod["metadata"]["name"])  # the API server reaches the kubelet
    assert logs.returncode == 0, logs.stderr
    print(f"Job to Complete in {took:.1f}s (container: sleep 4)")


def test_kwok_never_writes_the_real_nodes_lease_status_or_pods(real_lab, image):
    """Every write to the real node's Lease, its status and its pods' status is in the audit log: each is the
    kubelet's. With kwok managing all nodes, kwok's own writes would show here (it races the kubelet)."""
    kube = real_lab.kube()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watched", "namespace": NS},
           "spec": {**ON_THE_NODE, "containers": [{"name": "c", "image": image, "command": ["sleep", "60"]}]}}
    assert kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod).status_code == 201
    wait_for(lambda: condition(kube.get(f"/api/v1/namespaces/{NS}/pods/watched"), "Ready"), timeout=60)
    time.sleep(11)  # one more node status report (every 10 s) and Lease renewals
    writes = []
    for line in (real_lab.state_dir / "logs" / "audit.log").read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef", {})
        ours = (ref.get("name") == realnode.NAME and ref.get("resource") in ("leases", "nodes")
                and (ref.get("resource") == "leases" or ref.get("subresource") == "status")) or \
               (ref.get("namespace") == NS and ref.get("resource") == "pods" and ref.get("subresource") == "status")
        if ours and event.get("verb") in ("create", "update", "patch") and event.get("stage") == "ResponseComplete":
            writes.append((event["user"]["username"], event.get("userAgent", ""), ref.get("resource"),
                           ref.get("subresource", "")))
    kinds = {(w[2], w[3]) for w in writes}
    assert {("leases", ""), ("nodes", "status"), ("pods", "status")} <= kinds, kinds  # the log does see them
    strangers = [w for w in writes if w[0] != f"system:node:{realnode.NAME}"
                 and not (w[2] == "nodes" and w[1].startswith("python"))]  # lab up sets its address once
    assert strangers == [], strangers
    assert not [w for w in writes if w[1].startswith("kwok")]


def test_the_charts_controller_runs_in_a_pod_on_the_real_node(real_lab, image, tmp_path):
    ns = "gpualign-system"
    values = real_lab.cli("lab", "chart-values")
    assert values.code == 0, values.err
    (tmp_path / "values.yaml").write_text(values.out)
    port = YAML(typ="safe").load(values.out)["servicePort"]
    try:
        helm(real_lab, "install", "ga", str(CHART), "-n", ns, "--create-namespace", "-f",
             str(tmp_path / "values.yaml"), "--wait", "--timeout", "120s")
        kube = real_lab.kube()
        pods = kube.get_json(f"/api/v1/namespaces/{ns}/pods",
                             params={"labelSelector": "app=gpualign-controller"})["items"]
        assert len(pods) == 1 and condition(pods[0], "Ready") and pods[0]["spec"]["nodeName"] == realnode.NAME
        name = pods[0]["metadata"]["name"]
        lease = wait_for(lambda: (le := kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/"
                                                  "gpualign-controller"))
                         and le["spec"].get("holderIdentity") == name and le, timeout=30)
        assert lease
        assert httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        added = real_lab.cli("lab", "add-node", "gpu-z9", "--kernel", "5.15.0-999-generic")
        assert added.code == 0, added.err

        def event() -> dict | None:
            items = kube.get_json("/api/v1/events", params={"fieldSelector": "reason=DriverImageMissing,"
                                                                        "involvedObject.name=gpu-z9"})["items"]
            return items[0] if items else None

        raised = wait_for(event, timeout=30)
        assert "580-5.15.0-999-generic-ubuntu22.04 is missing" in raised["message"]
        assert raised["source"].get("component", raised.get("reportingComponent", "")).startswith("gpualign")
        metrics = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "gpualign_missing_driver_images 1.0" in metrics
    finally:
        helm(real_lab, "uninstall", "ga", "-n", ns, "--wait", check=False)


def test_helm_uninstalls_hook_job_really_runs_and_releases_the_gates_labels(real_lab, image, tmp_path):
    ns = "gpualign-gate"
    skip, gated = "nvidia.com/gpu-driver-upgrade.skip", "gpualign.io/upgrade-gated"
    kube = real_lab.kube()
    values = real_lab.cli("lab", "chart-values")
    (tmp_path / "values.yaml").write_text(values.out)
    helm(real_lab, "install", "gate", str(CHART), "-n", ns, "--create-namespace", "-f", str(tmp_path / "values.yaml"),
         "--set", "gateOperatorUpgrades=true", "--set", "replicaCount=0", "--wait=false")
    kube.patch("/api/v1/nodes/gpu-a1", {"metadata": {"labels": {skip: "true"},
                                                     "annotations": {gated: "target image 580-x missing"}}})
    kube.patch("/api/v1/nodes/gpu-a2", {"metadata": {"labels": {skip: "true"}}})  # an admin's own hold
    try:
        started = time.monotonic()
        helm(real_lab, "uninstall", "gate", "-n", ns, "--wait", "--timeout", "120s")  # waits for the hook Job
        a1, a2 = kube.get("/api/v1/nodes/gpu-a1")["metadata"], kube.get("/api/v1/nodes/gpu-a2")["metadata"]
        assert skip not in a1["labels"] and gated not in (a1.get("annotations") or {})
        assert a2["labels"].get(skip) == "true"  # the admin's hold survives
        # The release was the hook's pod, on the real node, under the hook's ServiceAccount: the audit log says so.
        sa = f"system:serviceaccount:{ns}:gpualign-controller-gate-release"
        patches = [json.loads(line) for line in (real_lab.state_dir / "logs" / "audit.log").read_text().splitlines()
                   if '"gpu-a1"' in line and sa in line]
        assert any(p["verb"] == "patch" and p["objectRef"]["resource"] == "nodes" for p in patches)
        print(f"uninstall with its hook Job: {time.monotonic() - started:.1f}s")
    finally:
        kube.patch("/api/v1/nodes/gpu-a1", {"metadata": {"labels": {skip: None}, "annotations": {gated: None}}})
        kube.patch("/api/v1/nodes/gpu-a2", {"metadata": {"labels": {skip: None}}})


def test_lab_status_and_logs_show_the_real_node(real_lab):
    status = real_lab.cli("lab", "status", "-o", "json")
    assert status.code == 0, status.err
    node = json.loads(status.out)["realNode"]
    assert node["name"] == realnode.NAME and node["ready"] is True and node["pods"] >= 1
    text = real_lab.cli("lab", "status").out
    assert f"real node {realnode.NAME}: Ready" in text
    logs = real_lab.cli("lab", "logs", "kubelet", "-n", "5")
    assert logs.code == 0 and len(logs.out.splitlines()) == 5
    assert Path(real_lab.cli("lab", "logs", "containerd", "--path").out.strip()).exists()
    bad = real_lab.cli("lab", "logs", "nope")
    assert bad.code == 2 and "no lab component 'nope'" in bad.err and "kubelet" in bad.err


def test_a_second_lab_runs_beside_it_without_a_real_node_and_says_why(real_lab, tmp_path):
    second = {"GPUALIGN_LAB_DIR": str(tmp_path / "second")}
    asked = run_cli("lab", "up", "--scenario", "empty", "--real-node", env=second, timeout=120)
    assert asked.code == 2 and not (tmp_path / "second" / "state.json").exists()
    line = asked.err.strip().splitlines()[-1]
    assert line == (f"gpualign: error: no real node for this lab: the lab in {real_lab.state_dir} runs this "
                    "machine's real node (one per machine: kubelet's device-plugin socket and iptables chains are "
                    "host-wide)")
    try:
        default = run_cli("lab", "up", "--scenario", "empty", env={**second, "GPUALIGN_LAB_REAL_NODE": ""},
                          timeout=300)
        assert default.code == 0, default.err
        assert f"no real node: the lab in {real_lab.state_dir} runs this machine's real node" in default.err
        status = json.loads(run_cli("lab", "status", "-o", "json", env=second).out)
        assert status["running"] is True and status["realNode"] is None
    finally:
        run_cli("lab", "down", env=second)
    # the first lab's node is untouched by the second lab's start and stop
    assert json.loads(real_lab.cli("lab", "status", "-o", "json").out)["realNode"]["ready"] is True
