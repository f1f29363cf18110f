"""Oracle: NVIDIA's real GPU Operator in NVIDIADriver mode (one NVIDIADriver per pool, mixed OS, a RHEL node and a
node whose image is absent). gpualign's zero-flag check must name, for every GPU node, exactly the image the
operator deployed there."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab, token_kubeconfig
from tests.support.operator import check_json, operator_driver_pods, wait_operator_pod
from tests.support.waits import wait_for

pytestmark = pytest.mark.lab

POOLS = {"gpu-a1": "train", "gpu-a2": "train", "gpu-c1": "train", "gpu-b1": "infer", "gpu-m1": "infer",
         "gpu-r1": "rhel"}


@pytest.fixture(scope="module")
def oplab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("op-nd") / "state", "operator-nvidiadriver")
    yield lab
    run_cli("lab", "down", env=lab.env)


def test_required_image_is_byte_for_byte_the_operators_pod_image(oplab):
    pods = operator_driver_pods(oplab)
    assert set(pods) == set(POOLS), pods
    code, data, err = check_json(oplab)  # no flag at all: everything comes from the operator's objects
    assert code == 1, err  # gpu-m1's image is missing
    assert data["operator"]["mode"] == "nvidiadriver"
    assert data["ledger"] == [f"registry://{oplab.registry}/nvidia/driver"]
    by_name = {n["name"]: n for n in data["nodes"]}
    assert set(by_name) == set(POOLS)
    for node, pool in POOLS.items():
        finding, pod = by_name[node], pods[node]
        assert pod["owner"] == f"NVIDIADriver/{pool}"
        assert finding["image"] == pod["image"], node  # byte for byte
        assert finding["operator_image"] == pod["image"]
        assert finding["source"] == f"nvidiadriver/{pool}"
    assert by_name["gpu-r1"]["image"].endswith("-5.14.0-427.37.1.el9_4.x86_64-rhel9.4")  # this operator: rhel9.4
    assert by_name["gpu-b1"]["branch"] == "595" and by_name["gpu-a1"]["branch"] == "580"  # per pool
    # The absent image: flagged missing from the ledger, and the operator's pod indeed cannot pull it.
    assert by_name["gpu-m1"]["status"] == "missing"
    assert pods["gpu-m1"]["state"] in ("ImagePullBackOff", "ErrImagePull")
    assert [m["nodes"] for m in data["missing"]] == [["gpu-m1"]]
    assert {n: f["status"] for n, f in by_name.items() if n != "gpu-m1"} == dict.fromkeys(set(POOLS) - {"gpu-m1"},
                                                                                          "present")
    assert data["summary"]["operator_mismatch"] == 0


def test_a_new_node_is_flagged_from_the_ledger_as_the_operator_deploys_it(oplab):
    """A node with a new kernel joins the infer pool: gpualign names its image (absent) the moment it exists, and
    the operator's pod for it then fails to pull exactly that image."""
    add = oplab.cli("lab", "add-node", "gpu-n1", "--kernel", "6.8.0-50-generic", "--os", "ubuntu24.04",
                    "--label", "pool=infer")
    assert add.code == 0, add.err
    code, data, _ = check_json(oplab, "-l", "kubernetes.io/hostname=gpu-n1")
    node = data["nodes"][0]
    assert code == 1 and node["status"] == "missing"
    assert node["image"] == f"{oplab.registry}/nvidia/driver:595-6.8.0-50-generic-ubuntu24.04"
    pod = wait_operator_pod(oplab, "gpu-n1")  # gpu-m1's pool is never ready: the operator may take a while
    assert pod["image"] == node["image"]
    wait_for(lambda: operator_driver_pods(oplab)["gpu-n1"]["state"] in ("ImagePullBackOff", "ErrImagePull"),
             timeout=30, what="the failed pull")


def test_rules_follow_the_operator_version(oplab):
    """This operator (main of 2025-09) keeps RHEL's full VERSION_ID; v26.7.0 cuts it to the major number. Told it
    runs v26.7.0, gpualign expects rhel9, and so flags the rhel9.4 image the operator really deployed."""
    _, detected, _ = check_json(oplab, "-l", "pool=rhel")
    assert detected["rules"]["operator_version"] == "v0.0.0-20250917190837-d73a0086a6ba"
    assert detected["nodes"][0]["image"].endswith("-rhel9.4") and detected["nodes"][0]["status"] == "present"
    _, older, _ = check_json(oplab, "-l", "pool=rhel", "--operator-version", "v25.10.1")
    assert older["nodes"][0]["image"] == detected["nodes"][0]["image"]
    code, newer, _ = check_json(oplab, "-l", "pool=rhel", "--operator-version", "v26.7.0")
    node = newer["nodes"][0]
    assert code == 1 and node["image"].endswith("-5.14.0-427.37.1.el9_4.x86_64-rhel9")
    assert node["status"] == "operator-mismatch" and node["operator_image"].endswith("-rhel9.4")


def test_plan_needs_no_ledger_beside_the_operator_and_takes_each_pools_branch(oplab):
    """As check: the operator's objects name the repository (the ledger) and each pool's branch."""
    res = oplab.cli("plan", "--kernel", "5.15.0-125-generic", "-o", "json")
    assert res.code == 1, res.err  # a new kernel: images to build
    data = json.loads(res.out)
    assert data["source"]["ledger"] == [f"registry://{oplab.registry}/nvidia/driver"]
    assert data["repository"] == f"{oplab.registry}/nvidia/driver"
    infer = {n["metadata"]["name"] for n in oplab.kube().nodes("pool=infer")}
    branches = {tuple(n["nodes"]): n["branch"] for n in data["needed"]}
    assert branches and set(branches.values()) == {"580"}  # 5.15: only the train pool's generic 22.04 nodes take it
    # the infer pool runs Ubuntu 24.04: planned on a 6.8 kernel, each pool gets its NVIDIADriver's branch
    res = oplab.cli("plan", "--kernel", "6.8.0-50-generic", "-l", "pool=infer", "-o", "json")
    branches = {tuple(n["nodes"]): n["branch"] for n in json.loads(res.out)["needed"]}
    assert branches and all(set(nodes) <= infer for nodes in branches) and set(branches.values()) == {"595"}
    # with --ledger, the branches still come from the operator's objects, as check takes them (the review's #13:
    # "cannot plan: no driver branch … pass --policy")
    res = oplab.cli("plan", "--kernel", "6.8.0-50-generic", "-l", "pool=infer", "--ledger",
                    f"registry://{oplab.registry}/nvidia/driver", "-o", "json")
    assert {tuple(n["nodes"]): n["branch"] for n in json.loads(res.out)["needed"]} == branches, res.err
    several = oplab.cli("plan", "--kernel", "5.15.0-125-generic", "--all-contexts")
    assert several.code == 2 and "only a single cluster's GPU Operator objects can stand in for it" in several.err


def test_flags_override_the_operators_objects(oplab):
    code, data, err = check_json(oplab, "-l", "pool=train", "--driver-branch", "595", "--ledger",
                                 f"registry://{oplab.registry}/nvidia/driver")
    assert {n["source"] for n in data["nodes"]} == {"flags"}
    assert {n["branch"] for n in data["nodes"]} == {"595"}
    # the operator still runs 580 there: an upgrade in waiting, not a mismatch
    assert {n["status"] for n in data["nodes"]} == {"missing"}, err


def test_without_rbac_for_the_crs_check_falls_back_to_flags_and_says_so(oplab, tmp_path):
    for manifest in (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": "default"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "node-reader"},
         "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "node-reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]},
    ):
        path = tmp_path / f"{manifest['kind']}.json"
        path.write_text(json.dumps(manifest))
        oplab.kubectl("apply", "-f", str(path), check=True)
    config = tmp_path / "reader-kubeconfig"
    token_kubeconfig(oplab, "default", "reader", config, "sa")
    bare = run_cli("check", "--kubeconfig", str(config))
    assert bare.code == 2
    assert "not allowed to read ClusterPolicy objects" in bare.err and "expectations come from flags" in bare.err
    assert "no ledger" in bare.err and "Traceback" not in bare.err
    flagged = run_cli("check", "--kubeconfig", str(config), "-o", "json", "--driver-branch", "580",
                      "-l", "pool=train", "--ledger", f"registry://{oplab.registry}/nvidia/driver")
    assert flagged.code == 0, flagged.err
    data = json.loads(flagged.out)
    assert data["operator"] is None and {n["source"] for n in data["nodes"]} == {"flags"}
    assert any("not allowed to read ClusterPolicy" in w for w in data["warnings"])


def test_with_autoupgrade_off_the_operator_wipes_the_state_label_so_gpualign_will_not_walk(oplab):
    """The reason `gpualign upgrade` stays off operator-owned nodes even with autoUpgrade off: the operator deletes
    the state label from every node on each reconcile (and a label change triggers one)."""
    state = "nvidia.com/gpu-driver-upgrade-state"
    assert oplab.kubectl("label", "node", "gpu-a1", f"{state}=upgrade-required").returncode == 0
    kube = oplab.kube()
    wait_for(lambda: state not in kube.get("/api/v1/nodes/gpu-a1")["metadata"]["labels"], timeout=30,
             what="the operator deleting the state label")
    status = oplab.cli("status", "-l", "pool=train")
    assert status.code == 0 and "driver.upgradePolicy.autoUpgrade being off also removes these labels" in status.out
    res = oplab.cli("upgrade", "-l", "pool=train", "--ledger", f"registry://{oplab.registry}/nvidia/driver", "--yes")
    assert res.code == 1 and "Traceback" not in res.err
    assert "ClusterPolicy cluster-policy has spec.driver.upgradePolicy.autoUpgrade off" in res.err
    assert "deletes nvidia.com/gpu-driver-upgrade-state from every node" in res.err
    assert kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpualign-upgrade") is None


def test_overlapping_nvidiadrivers_are_named_as_the_operator_refuses_them(oplab, tmp_path):
    """Runs last in this module: the real operator refuses every NVIDIADriver while two overlap."""
    overlap = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "all-train"},
               "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": f"{oplab.registry}/nvidia",
                        "image": "driver", "version": "595", "nodeSelector": {"pool": "train"}}}
    path = tmp_path / "overlap.json"
    path.write_text(json.dumps(overlap))
    oplab.kubectl("apply", "-f", str(path), check=True)
    try:
        code, data, err = check_json(oplab)
        assert code == 1
        assert "nvidiadriver/all-train and nvidiadriver/train both select gpu-a1 and 2 more node(s)" in err
        by_name = {n["name"]: n for n in data["nodes"]}
        for node in ("gpu-a1", "gpu-a2", "gpu-c1"):
            assert by_name[node]["status"] == "unknown"
            assert "ConflictingNodeSelector" in by_name[node]["reason"]
        assert by_name["gpu-b1"]["status"] == "present"  # other pools are still derived

        def operator_says_conflict() -> bool:
            cr = json.loads(oplab.kubectl("get", "nvidiadriver", "all-train", "-o", "json", check=True).stdout)
            return any(c.get("reason") == "ConflictingNodeSelector"
                       for c in (cr.get("status") or {}).get("conditions") or [])

        wait_for(operator_says_conflict, timeout=60, what="the operator's own ConflictingNodeSelector condition")
    finally:
        oplab.kubectl("delete", "nvidiadriver", "all-train", "--wait=false")
