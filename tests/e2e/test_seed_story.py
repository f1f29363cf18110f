"""The seed's story, end to end, on its own lab with real Kubernetes components.

1. A node with a newer kernel arrives: `check` flags only it. 2. Its image is pushed: `check` passes.
3. An upgrade of the pool to branch 595 starts while a PDB that allows no disruption protects the GPU training
   Deployment: the preview names the PDB, the walk upgrades every other node and holds the trainer's nodes
   uncordoned before cordon, and `status` / `why` say so. (The real refusal of an eviction by that PDB is shown by
   `kubectl drain` in the demo, and by the operator's order in test_upgrade_reliability.)
4. The PDB is relaxed: the held nodes are admitted one at a time and the walk ends.
5. Every node ends upgrade-done with the new driver labels; only nodes the
   upgrade cordoned are uncordoned, and an admin-cordoned node stays cordoned.
"""

from __future__ import annotations

import json

import pytest

from gpualign.base import labels as L
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.upgrade import UpgradeProcess
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NEW_KERNEL = "5.15.0-125-generic"
POOLS = ["5.15.0-124-generic-ubuntu22.04", "6.8.0-48-generic-ubuntu24.04", "6.8.0-1015-aws-ubuntu22.04",
         "6.8.0-1017-azure-ubuntu24.04", "6.8.0-1015-gcp-ubuntu22.04", f"{NEW_KERNEL}-ubuntu22.04"]


@pytest.fixture(scope="module")
def story_lab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("story") / "state")
    yield lab
    run_cli("lab", "down", env=lab.env)


def test_the_seed_story(story_lab):
    lab = story_lab
    ledger = f"registry://{lab.registry}/nvidia/driver"
    kube = lab.kube()

    # 1. a node one kernel patch ahead: only it is flagged
    assert lab.cli("lab", "add-node", "gpu-new", "--kernel", NEW_KERNEL).code == 0
    res = lab.cli("check", "--ledger", ledger, "-o", "json")
    assert res.code == 1
    assert [m["nodes"] for m in json.loads(res.out)["missing"]] == [["gpu-new"]]

    # 2. push its image: the check passes once the driver pod has pulled it
    assert lab.cli("lab", "push-image", f"580-{NEW_KERNEL}-ubuntu22.04").code == 0
    wait_for(lambda: lab.cli("check", "--ledger", ledger).code == 0, timeout=30, what="clean check")

    # 3. the new branch's images exist for every pool; an admin has cordoned a node (not a trainer's) for
    #    unrelated reasons
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    trainer_nodes = {p["spec"]["nodeName"] for p in kube.pods("ml", label_selector="app=trainer")}
    assert len(trainer_nodes) == 2  # one replica per node (required anti-affinity)
    admin = "gpu-c1" if "gpu-c1" not in trainer_nodes else "gpu-d1" if "gpu-d1" not in trainer_nodes else "gpu-e1"
    assert lab.kubectl("cordon", admin).returncode == 0

    dry = lab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--dry-run")
    assert dry.code == 1  # the preview already knows the PDB would refuse
    assert "PDB ml/trainer-pdb (2 healthy, 2 required, 0 disruptions allowed)" in dry.out
    assert "uncordoned: it can never allow a disruption; relax it" in dry.out
    for node in trainer_nodes:  # the order it would take holds the PDB's nodes back, and says why
        assert (f"held: {node}: waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions (2 healthy, "
                "2 required)") in dry.out

    # With --timeout the walk waits for held nodes instead of ending when only they remain.
    walk = UpgradeProcess.start(lab.env, "--to-branch", "595", "--ledger", ledger, "--timeout", "600")
    held_line = walk.wait_line("waiting before cordon: PDB ml/trainer-pdb", timeout=120)
    held_node = held_line.split()[1].rstrip(":")
    assert held_node in trainer_nodes
    others = {n["metadata"]["name"] for n in kube.nodes(f"{L.GPU_PRESENT}=true")} - trainer_nodes

    def others_done() -> bool:
        rows = json.loads(lab.cli("status", "--ledger", ledger, "--to-branch", "595", "-o", "json").out)["nodes"]
        return all(r["state"] == "upgrade-done" for r in rows if r["name"] in others)

    wait_for(others_done, timeout=240, what="every node the PDB does not guard upgraded")
    status = json.loads(lab.cli("status", "--ledger", ledger, "--to-branch", "595", "-o", "json").out)
    for row in (r for r in status["nodes"] if r["name"] in trainer_nodes):
        assert (row["state"], row["cordoned"], row["hold"]) == ("upgrade-required", False, "before-cordon")
        assert row["blocker"].startswith("waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions")
    why = lab.cli("why", held_node, "--ledger", ledger, "--to-branch", "595")
    assert f"{held_node} is in upgrade-required" in why.out
    assert "held before cordon (still schedulable, its pods untouched): PDB ml/trainer-pdb allows 0" in why.out
    events = [e for e in kube.list_raw("/api/v1/namespaces/default/events")
              if e["reason"] == "GPUDriverUpgrade" and e["involvedObject"]["name"] == held_node]
    assert events and "waiting before cordon: PDB ml/trainer-pdb" in events[0]["message"]
    for node in trainer_nodes:  # never cordoned, its training pods untouched
        assert not kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable")

    # 4. relax the PDB: the held nodes are admitted one at a time, and the walk ends
    kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    assert walk.finish(timeout=300) == 0, walk.output

    # 5. every node done, new driver loaded; only our cordons undone
    nodes = {n["metadata"]["name"]: n for n in kube.nodes(f"{L.GPU_PRESENT}=true")}
    assert {n: x["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state") for n, x in nodes.items()} == \
        dict.fromkeys(nodes, "upgrade-done")
    assert {x["metadata"]["labels"][L.DRIVER_CURRENT_FULL] for x in nodes.values()} == {"595.91.07"}
    assert nodes[admin]["spec"].get("unschedulable") is True
    assert [n for n, x in nodes.items() if x["spec"].get("unschedulable")] == [admin]
    assert "was cordoned before the upgrade: left cordoned" in walk.output
    assert "gpualign.io/upgrade-blocker" not in nodes[held_node]["metadata"].get("annotations", {})
