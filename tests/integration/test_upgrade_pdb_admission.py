"""PDB-aware admission on the default lab fleet: a saturated PDB (ml/trainer-pdb, minAvailable 2 of 2) guards the
trainer's two nodes. With --max-parallel 2 the walk upgrades every other node and never cordons those two; relaxed
mid-walk, they are admitted one at a time and the PDB is never breached. And the most common PDB, maxUnavailable 1
over a service with several replicas per node, lets every node go, node after node, as kubectl drain would. A
recorder watching every node, PDB and pod change is the witness; its admission oracle replays the cluster's own
record in resourceVersion order."""

from __future__ import annotations

import json

import pytest

from gpualign.base import labels as L
from tests.recorder import STATE, Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import POOLS, UpgradeProcess
from tests.support.waits import pod_ready, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture
def plab(tmp_path):
    lab = start_lab(tmp_path / "state")
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    yield lab
    run_cli("lab", "down", env=lab.env)


def trainer_nodes(kube) -> set[str]:
    return wait_for(lambda: {p["spec"]["nodeName"] for p in kube.pods("ml", label_selector="app=trainer")
                             if p["spec"].get("nodeName")} if len(kube.pods("ml", label_selector="app=trainer")) == 2
                    else None, what="both trainer pods placed")


def ever_cordoned(recorder: Recorder, names: set[str]) -> list[str]:
    return sorted({c.name for c in recorder.of("node") if c.name in names and c.type != "DELETED"
                   and (c.obj.get("spec") or {}).get("unschedulable")})


def states_seen(recorder: Recorder, name: str) -> list[str]:
    seen: list[str] = []
    for c in recorder.of("node"):
        if c.name == name:
            state = ((c.obj.get("metadata") or {}).get("labels") or {}).get(STATE, "")
            if not seen or seen[-1] != state:
                seen.append(state)
    return seen


@pytest.mark.timeout(600)
def test_a_saturated_pdb_holds_its_nodes_uncordoned_and_the_rest_upgrade(plab):
    kube = plab.kube()
    held = trainer_nodes(kube)
    ledger = f"registry://{plab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    try:
        res = plab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--yes", "--max-parallel", "2",
                       timeout=400)
    finally:
        recorder.stop()
    assert res.code == 1, res.out + res.err  # only PDB-held nodes remain: named, exit 1
    nodes = {n["metadata"]["name"]: n for n in kube.nodes(f"{L.GPU_PRESENT}=true")}
    states = {n: x["metadata"]["labels"].get(STATE) for n, x in nodes.items()}
    assert {n for n, s in states.items() if s == "upgrade-done"} == set(nodes) - held
    assert {states[n] for n in held} == {"upgrade-required"}
    assert ever_cordoned(recorder, held) == []  # never cordoned, not even for a moment
    for name in held:
        blocker = nodes[name]["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
        assert blocker == ("waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions (2 healthy, "
                           "2 required), and never will: it requires 2 of its 2 pods")
    assert "2 node(s) held before cordon" in res.out and "relax PDB ml/trainer-pdb" in res.out
    assert recorder.pdb_breaches() == []
    assert recorder.pods_below_minimum() == []
    status = json.loads(plab.cli("status", "--ledger", ledger, "--to-branch", "595", "-o", "json").out)
    assert {r["name"]: r["hold"] for r in status["nodes"] if r["name"] in held} == dict.fromkeys(held,
                                                                                               "before-cordon")
    table = plab.cli("status", "--ledger", ledger, "--to-branch", "595")
    assert "waiting before cordon: PDB ml/trainer-pdb" in table.out
    # a pool whose every node is held keeps its DaemonSet on the old image: a driver pod restarted by anything
    # else comes back on the driver it had, not on the new one under the trainer (the review's #11)
    from gpualign.upgrade.snapshot import DRIVER_SELECTOR, Pool

    for ds in kube.list_raw("/apis/apps/v1/daemonsets", label_selector=DRIVER_SELECTOR):
        pool = Pool(ds, None)
        members = {n for n, x in nodes.items() if pool.selects(x["metadata"]["labels"])}
        if members:
            want = "580-" if members <= held else "595-"
            assert pool.tag is not None and pool.tag.startswith(want), (ds["metadata"]["name"], members, held)
    # without --to-branch, status and why show the walk's own target, not the DaemonSet's (the review's #15)
    plain = json.loads(plab.cli("status", "--ledger", ledger, "-o", "json").out)
    assert {r["name"]: r["target_tag"].split("-", 1)[0] for r in plain["nodes"] if r["name"] in held} == \
        dict.fromkeys(held, "595")
    why = plab.cli("why", sorted(held)[0], "--ledger", ledger)
    assert "; target 595-" in why.out, why.out


@pytest.mark.timeout(600)
def test_relaxed_mid_walk_the_held_nodes_are_admitted_one_at_a_time(plab):
    kube = plab.kube()
    held = trainer_nodes(kube)
    ledger = f"registry://{plab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    walk = UpgradeProcess.start(plab.env, "--to-branch", "595", "--ledger", ledger, "--max-parallel", "2",
                                "--timeout", "400")
    try:
        walk.wait_line("waiting before cordon: PDB ml/trainer-pdb", timeout=120)
        walk.wait_line("→ upgrade-done", timeout=120)  # the walk goes on around the held nodes
        kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
        assert walk.finish(timeout=400) == 0, walk.output
    finally:
        recorder.stop()
    nodes = kube.nodes(f"{L.GPU_PRESENT}=true")
    assert {n["metadata"]["labels"].get(STATE) for n in nodes} == {"upgrade-done"}
    assert recorder.pdb_breaches() == []
    assert recorder.pods_below_minimum() == []
    # One at a time: a trainer node entered the walk only while the PDB had a disruption that no trainer pod still
    # to evict on a node already in the walk had spoken for (a pod the PDB already counts as disrupted is no longer
    # ahead: its eviction spent the disruption in the same write). The state label is not the oracle: a node can
    # sit at pod-deletion-required for a pass after its last pod left.
    assert recorder.admissions_without_a_free_disruption() == [], recorder.errors
    for name in held:
        assert "cordon-required" in states_seen(recorder, name)


def inference_service(nodes: list[str]) -> list[dict]:
    """8 one-GPU replicas under maxUnavailable 1, placed by the scheduler on four nodes (so at least one holds two),
    with no anti-affinity: the most common PDB shape."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kx"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "kx"},
         "spec": {"replicas": 8, "selector": {"matchLabels": {"app": "infer"}},
                  "template": {"metadata": {"labels": {"app": "infer"}}, "spec": {
                      "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                          "nodeSelectorTerms": [{"matchExpressions": [
                              {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}},
                      "containers": [{"name": "infer", "image": "nvcr.io/nvidia/tritonserver:25.01-py3",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "infer-pdb", "namespace": "kx"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "infer"}}}},
    ]


@pytest.mark.timeout(900)
def test_several_replicas_per_node_under_max_unavailable_one_finish_node_after_node(plab):
    kube = plab.kube()
    kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    for obj in inference_service(["gpu-a1", "gpu-a2", "gpu-b1", "gpu-c1"]):  # first by name: they meet
        kube.apply(obj)

    def placed() -> dict[str, int] | None:
        pods = kube.pods("kx", label_selector="app=infer")
        if len(pods) != 8 or not all(pod_ready(p) for p in pods):
            return None
        per_node: dict[str, int] = {}
        for p in pods:
            per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        return per_node

    per_node = wait_for(placed, timeout=120, what="8 inference replicas Ready")
    assert max(per_node.values()) >= 2, per_node  # 8 on 4 nodes: some node holds two (the case)
    wait_for(lambda: (kube.get("/apis/policy/v1/namespaces/kx/poddisruptionbudgets/infer-pdb") or {})
             .get("status", {}).get("disruptionsAllowed") == 1, what="infer-pdb allowing 1")
    ledger = f"registry://{plab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    try:
        res = plab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--yes", "--max-parallel", "3",
                       "--timeout", "480", timeout=600)
    finally:
        recorder.stop()
    context = f"placement {per_node}; recorder errors {recorder.errors}"
    assert res.code == 0, f"{context}\n{res.out}{res.err}"
    nodes = kube.nodes(f"{L.GPU_PRESENT}=true")
    assert {n["metadata"]["labels"].get(STATE) for n in nodes} == {"upgrade-done"}, context
    assert recorder.pdb_breaches() == [], f"{recorder.breach_evidence()}; {context}"
    assert recorder.pods_below_minimum() == [], f"{context}"
    assert recorder.admissions_without_a_free_disruption() == [], context
    # the service's nodes come first by name, so with 3 slots they met: they waited for each other ...
    assert "waiting before cordon: PDB kx/infer-pdb allows" in res.err, res.err  # (progress goes to stderr)
    assert "never will" not in res.out + res.err  # ... and none was taken for one that can never go
    doubled = {n for n, count in per_node.items() if count >= 2}
    for name in doubled:  # a node with two replicas went all the way through, its pods one after the other
        assert states_seen(recorder, name)[-1] == "upgrade-done"
        assert "pod-deletion-required" in states_seen(recorder, name)
    final = kube.pods("kx", label_selector="app=infer")
    assert len(final) == 8 and all(pod_ready(p) for p in final)
