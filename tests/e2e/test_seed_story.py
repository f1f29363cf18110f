"""The seed's story, end to end, on its own lab with real Kubernetes components.

1. A node with a newer kernel arrives: `check` flags only it. 2. Its image is pushed: `check` passes.
3. An upgrade of the pool to branch 595 starts while a PDB protects the GPU training Deployment: the preview names
   the PDB, the real API server refuses the eviction, and `status` / `why` say so.
4. The PDB is relaxed: the walk goes on. 5. Every node ends upgrade-done with the new driver labels; only nodes the
   upgrade cordoned are uncordoned, and an admin-cordoned node stays cordoned.
"""

from __future__ import annotations

import json

import pytest

from gpualign import labels as L
from tests.conftest import run_cli, start_lab
from tests.helpers import wait_for
from tests.upgrade_helpers import UpgradeProcess

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

    # 3. the new branch's images exist for every pool; an admin has cordoned gpu-c1 for unrelated reasons
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    assert lab.kubectl("cordon", "gpu-c1").returncode == 0
    trainer_nodes = {p["spec"]["nodeName"] for p in kube.pods("ml", label_selector="app=trainer")}
    assert len(trainer_nodes) >= 1

    dry = lab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--dry-run")
    assert dry.code == 1  # the preview already knows the PDB will refuse
    assert "PDB ml/trainer-pdb (2 healthy, 2 required, 0 disruptions allowed)" in dry.out
    assert "would block" in dry.out

    walk = UpgradeProcess.start(lab.env, "--to-branch", "595", "--ledger", ledger, "--eviction-timeout", "300")
    blocked_line = walk.wait_line("refused by PDB ml/trainer-pdb", timeout=120)
    blocked_node = blocked_line.split()[1].rstrip(":")
    assert blocked_node in trainer_nodes

    status = json.loads(lab.cli("status", "--ledger", ledger, "--to-branch", "595", "-o", "json").out)
    row = next(n for n in status["nodes"] if n["name"] == blocked_node)
    assert row["state"] == "pod-deletion-required" and row["cordoned"] == "upgrade"
    assert "refused by PDB ml/trainer-pdb: 2 healthy, 2 required, 0 disruptions allowed" in row["blocker"]
    why = lab.cli("why", blocked_node, "--ledger", ledger, "--to-branch", "595")
    assert f"{blocked_node} is in pod-deletion-required" in why.out
    assert "eviction of ml/trainer-" in why.out and "refused by PDB ml/trainer-pdb" in why.out
    events = [e for e in kube.list_raw("/api/v1/namespaces/default/events")
              if e["reason"] == "GPUDriverUpgrade" and e["involvedObject"]["name"] == blocked_node]
    assert events and "refused by PDB ml/trainer-pdb" in events[0]["message"]

    # 4. relax the PDB: the walk goes on by itself
    kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    assert walk.finish(timeout=300) == 0, walk.output

    # 5. every node done, new driver loaded; only our cordons undone
    nodes = {n["metadata"]["name"]: n for n in kube.nodes(f"{L.GPU_PRESENT}=true")}
    assert {n: x["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state") for n, x in nodes.items()} == \
        dict.fromkeys(nodes, "upgrade-done")
    assert {x["metadata"]["labels"][L.DRIVER_CURRENT_FULL] for x in nodes.values()} == {"595.91.07"}
    assert nodes["gpu-c1"]["spec"].get("unschedulable") is True
    assert [n for n, x in nodes.items() if x["spec"].get("unschedulable")] == ["gpu-c1"]
    assert "was cordoned before the upgrade: left cordoned" in walk.output
    assert "gpualign.io/upgrade-blocker" not in nodes[blocked_node]["metadata"].get("annotations", {})
