"""The lab's smoke tests: each asserts what a real Kubernetes component did."""

from __future__ import annotations

import time

import pytest

from gpualign.base import labels as L
from tests.support.waits import pod_ready, wait_for

pytestmark = pytest.mark.lab


def _namespace(kube, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), what="default SA")


@pytest.fixture
def ns(lab, uid):
    kube = lab.kube()
    name = f"t-{uid}"
    _namespace(kube, name)
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")
    kube.close()


def _pods(kube, ns: str, selector: str) -> list[dict]:
    return kube.pods(ns, label_selector=selector)


def _gpu_node_names(kube) -> set[str]:
    return {n["metadata"]["name"] for n in kube.nodes(f"{L.GPU_PRESENT}=true")}


def test_daemonset_places_one_pod_per_matching_node(lab, ns):
    kube = lab.kube()
    kube.apply({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "probe", "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": "probe"}},
                         "template": {"metadata": {"labels": {"app": "probe"}},
                                      "spec": {"nodeSelector": {L.GPU_PRESENT: "true"},
                                               "containers": [{"name": "c", "image": "busybox"}]}}}})
    gpu_nodes = _gpu_node_names(kube)

    def placed():
        pods = _pods(kube, ns, "app=probe")
        nodes = [p["spec"].get("nodeName") for p in pods]
        return pods if sorted(n for n in nodes if n) == sorted(gpu_nodes) and all(map(pod_ready, pods)) else None

    pods = wait_for(placed, timeout=30, what="one Ready probe pod per GPU node")
    assert len(pods) == len(gpu_nodes) >= 5


def _deployment(name: str, ns: str, replicas: int, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "trainer:1"}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        spec["tolerations"] = [{"operator": "Exists"}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def _pdb(name: str, ns: str, min_available: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"{name}-pdb",
                                                                                   "namespace": ns},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}}}


def _pdb_settled(kube, ns: str, name: str, healthy: int) -> dict | None:
    pdb = kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}-pdb")
    st = (pdb or {}).get("status") or {}
    if st.get("currentHealthy") == healthy and st.get("observedGeneration") == pdb["metadata"]["generation"]:
        return pdb
    return None


def test_pdb_refuses_eviction_with_429_then_allows_it_when_relaxed(lab, ns):
    kube = lab.kube()
    kube.apply(_deployment("trainer", ns, 2))
    kube.apply(_pdb("trainer", ns, 2))
    wait_for(lambda: _pdb_settled(kube, ns, "trainer", 2), what="PDB status from the disruption controller")
    pod = _pods(kube, ns, "app=trainer")[0]["metadata"]["name"]

    refused = kube.evict(ns, pod)
    assert refused.status == 429
    assert "Cannot evict pod as it would violate the pod's disruption budget" in refused.message

    kube.apply(_pdb("trainer", ns, 1))
    result = wait_for(lambda: (r := kube.evict(ns, pod)).evicted and r, timeout=20,
                      what="eviction allowed after relaxing the PDB")
    assert result.status == 201 or result.status == 200
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}") is None, what="evicted pod gone")


def test_kubectl_drain_refused_by_pdb_leaves_node_cordoned(lab, ns, uid):
    node = f"drain-{uid}"
    res = lab.cli("lab", "add-node", node, "--no-gpu", "--label", f"gpualign.io/test={uid}")
    assert res.code == 0, res.err
    kube = lab.kube()
    kube.apply(_deployment("pinned", ns, 1, node=node))
    kube.apply(_pdb("pinned", ns, 1))
    wait_for(lambda: _pdb_settled(kube, ns, "pinned", 1), what="PDB settled")

    drain = lab.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10s")
    assert drain.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget" in drain.stderr
    assert kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable") is True  # the seed's half-state
    kube.delete(f"/api/v1/nodes/{node}")


def test_unsatisfiable_affinity_stays_pending_with_failedscheduling(lab, ns):
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "picky", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "x"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": L.DRIVER_LEGACY["major"], "operator": "Gt", "values": ["999"]}]}]}}}}})
    events = wait_for(lambda: [e for e in kube.list_raw(f"/api/v1/namespaces/{ns}/events")
                               if e["involvedObject"]["name"] == "picky" and e["reason"] == "FailedScheduling"],
                      what="FailedScheduling event")
    assert "didn't match Pod's node affinity/selector" in events[0]["message"]
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/picky")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")


def _job(name: str, ns: str, delay: str | None) -> dict:
    ann = {"pod-complete.stage.kwok.x-k8s.io/delay": delay} if delay else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"annotations": ann},
                                                     "spec": {"restartPolicy": "Never",
                                                              "containers": [{"name": "c", "image": "x"}]}}}}


def _job_done(kube, ns: str, name: str) -> bool:
    job = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
    return any(c["type"] == "Complete" and c["status"] == "True" for c in job.get("status", {}).get("conditions") or [])


def test_job_completes_and_annotated_job_runs_for_its_delay(lab, ns):
    kube = lab.kube()
    kube.apply(_job("quick", ns, None))
    kube.apply(_job("slow", ns, "20s"))
    wait_for(lambda: _job_done(kube, ns, "quick"), timeout=30, what="quick Job Complete")
    started = time.monotonic()
    wait_for(lambda: [p for p in _pods(kube, ns, "job-name=slow") if p["status"].get("phase") == "Running"],
             what="slow Job's pod Running")
    time.sleep(max(0.0, 5 - (time.monotonic() - started)))
    pods = _pods(kube, ns, "job-name=slow")
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    assert not _job_done(kube, ns, "slow")


def _driver_pod(kube, node: str) -> dict | None:
    pods = kube.pods("gpu-operator", label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}",
                     field_selector=f"spec.nodeName={node}")
    return pods[0] if pods else None


def _waiting_reason(pod: dict) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason")
    return None


def test_added_node_gets_ready_and_its_driver_pod_and_sim_follows_the_registry(lab, uid):
    node = f"gpu-new-{uid}"
    kernel = f"5.15.0-{200 + int(uid, 16) % 500}-generic"
    res = lab.cli("lab", "add-node", node, "--kernel", kernel, "--os", "ubuntu22.04", "--driver", "580.95.05")
    assert res.code == 0, res.err
    kube = lab.kube()
    node_obj = kube.get(f"/api/v1/nodes/{node}")
    assert node_obj["status"]["capacity"]["nvidia.com/gpu"] == "8"

    # Its pool's DaemonSet places a driver pod; the image for this brand-new kernel is not in the registry.
    pod = wait_for(lambda: (p := _driver_pod(kube, node)) and _waiting_reason(p) == "ImagePullBackOff" and p,
                   what="driver pod in ImagePullBackOff")
    assert kernel in pod["spec"]["containers"][0]["image"]
    assert not pod_ready(pod)

    tag = f"580-{kernel}-ubuntu22.04"
    assert lab.cli("lab", "push-image", tag, "--driver-version", "580.173.02").code == 0
    assert kube.delete(f"/api/v1/namespaces/gpu-operator/pods/{pod['metadata']['name']}") == 200
    wait_for(lambda: (p := _driver_pod(kube, node)) and p["metadata"]["uid"] != pod["metadata"]["uid"]
             and pod_ready(p), what="replacement driver pod Ready")
    # GFD relabels a node after its driver came up, as the simulator does: wait for that, not for luck
    labels = wait_for(lambda: (ls := kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"])
                      .get(L.DRIVER_CURRENT_FULL) == "580.173.02" and ls, what="the node's driver labels")
    assert labels[L.DRIVER_CURRENT_FULL] == "580.173.02"
    assert (labels[L.DRIVER_LEGACY["major"]], labels[L.DRIVER_LEGACY["minor"]], labels[L.DRIVER_LEGACY["rev"]]) \
        == ("580", "173", "02")
    kube.delete(f"/api/v1/nodes/{node}")


def test_lab_up_is_idempotent(lab):
    from gpualign.lab.cluster import LabState

    before = {n: p.pid for n, p in LabState.load(lab.state_dir).procs.items()}
    res = lab.cli("lab", "up")
    assert res.code == 0, res.err
    assert "lab already running" in res.err
    assert {n: p.pid for n, p in LabState.load(lab.state_dir).procs.items()} == before
    status = lab.cli("lab", "status")
    assert status.code == 0 and status.out.count("running") == len(before)
