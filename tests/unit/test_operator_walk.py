"""Beside the GPU Operator's walk (pure): the gate's decisions, the blockers read from the cluster, and the walker
check behind `gpualign upgrade`'s refusal."""

from __future__ import annotations

from types import SimpleNamespace

from gpualign.model import operator_config as oc
from gpualign.upgrade import states as S
from gpualign.upgrade.observe import blocker
from gpualign.upgrade.operator_walk import refusal, walked_by_operator
from tests.support.builders import pod


def test_blockers_read_from_the_cluster_for_the_operators_walk():
    pdb = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "t"}}},
           "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}}
    refused = blocker(S.POD_DELETION, pods=[pod("t1", labels={"app": "t"})], pdbs=[pdb], driver_pod=None,
                      target_tag=None, validators=[], events=[], node="n", drain=False)
    assert refused and refused.startswith("eviction of ml/t1 refused by PDB ml/p: 1 healthy, 1 required, 0 ")
    driver = {"metadata": {"name": "d", "namespace": "gpu-operator"},
              "spec": {"containers": [{"image": "reg/driver:595-k-ubuntu22.04"}]},
              "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting":
                                                                              {"reason": "ImagePullBackOff"}}}]}}
    pull = blocker(S.POD_RESTART, pods=[], pdbs=[], driver_pod=driver, target_tag="595-k-ubuntu22.04",
                   validators=[], events=[], node="n", drain=False)
    assert pull == "new driver pod gpu-operator/d is ImagePullBackOff: image reg/driver:595-k-ubuntu22.04"
    crashing = {**driver, "status": {"phase": "Running", "containerStatuses": [{
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "insmod: ERROR: could not insert module nvidia.ko: "
                                                               "Invalid parameters;\n kernel: nvidia: disagrees"}}}]}}
    crash = blocker(S.POD_RESTART, pods=[], pdbs=[], driver_pod=crashing, target_tag="595-k-ubuntu22.04",
                    validators=[], events=[], node="n", drain=False)
    assert crash == ("new driver pod gpu-operator/d is CrashLoopBackOff: image reg/driver:595-k-ubuntu22.04; it "
                     "exited saying: insmod: ERROR: could not insert module nvidia.ko: Invalid parameters; kernel: "
                     "nvidia: disagrees")  # its last words, on one line: the kernel's refusal
    events = [{"involvedObject": {"name": "n"}, "reason": S.EVENT_REASON, "type": "Warning",
               "lastTimestamp": "2026-11-30T01:00:00Z", "message": "old"},
              {"involvedObject": {"name": "n"}, "reason": S.EVENT_REASON, "type": "Warning",
               "lastTimestamp": "2026-11-30T02:00:00Z", "message": "Failed to delete workload pods"}]
    failed = blocker(S.FAILED, pods=[], pdbs=[], driver_pod=None, target_tag=None, validators=[], events=events,
                     node="n", drain=False)
    assert failed == "the GPU Operator failed it: Failed to delete workload pods"
    none = blocker(S.VALIDATION, pods=[], pdbs=[], driver_pod=None, target_tag=None, validators=[], events=[],
                   node="n", drain=False)
    assert none and "waits forever" in none


def snap_with(owner_kind: str | None):
    refs = [{"kind": owner_kind, "name": "x"}] if owner_kind else []
    pool = SimpleNamespace(obj={"metadata": {"ownerReferences": refs}})
    return SimpleNamespace(nodes={"n1": SimpleNamespace(pool=pool)})


def test_gpualign_refuses_only_nodes_the_operator_walks_itself():
    cp = {"apiVersion": "nvidia.com/v1", "metadata": {"name": "cluster-policy"},
          "spec": {"driver": {"usePrecompiled": True, "repository": "r", "image": "d", "version": "580",
                              "upgradePolicy": {"autoUpgrade": True}}}}
    on = oc.read([cp], [])
    assert on is not None and on.auto_upgrade and on.upgrade_policy
    assert walked_by_operator(on, snap_with("NVIDIADriver")) == ["n1"]  # type: ignore[arg-type]
    assert walked_by_operator(on, snap_with(None)) == []  # type: ignore[arg-type]  # a DaemonSet nobody owns
    off = oc.read([{**cp, "spec": {"driver": {**cp["spec"]["driver"], "upgradePolicy": {"autoUpgrade": False}}}}],
                  [])
    assert off is not None
    # off, the operator deletes the state label on every reconcile: still not gpualign's to walk
    assert walked_by_operator(off, snap_with("ClusterPolicy")) == ["n1"]  # type: ignore[arg-type]
    assert "deletes nvidia.com/gpu-driver-upgrade-state from every node" in refusal(off, ["n1"])
    bare = oc.read([{**cp, "spec": {"driver": {"usePrecompiled": True, "repository": "r", "image": "d",
                                               "version": "580"}}}], [])
    assert bare is not None and not bare.upgrade_policy and not bare.auto_upgrade
    message = refusal(on, ["n1"])
    assert "ClusterPolicy cluster-policy has spec.driver.upgradePolicy.autoUpgrade: true" in message
    assert "--gate-operator-upgrades" in message  # the message says what to do instead


def test_v26_the_refusal_names_which_nvidiadrivers_the_operator_walks():
    from gpualign.model import operator_config as oc
    from gpualign.upgrade.operator_walk import refusal

    def v26(name, selector, **spec):  # noqa: ANN001, ANN003, ANN202
        return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name},
                "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": "reg/nvidia", "image": "driver",
                         "version": "580", "default": False, "nodeSelector": selector, **spec}}

    config = oc.read([{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"},
                       "spec": {"driver": {"useNvidiaDriverCRD": True}}}],
                     [v26("train", {"pool": "train"}), v26("infer", {"pool": "infer"},
                                                         upgradePolicy={"autoUpgrade": False})])
    assert config is not None
    said = refusal(config, ["gpu-a1"])
    assert "walks the nodes of nvidiadriver/train itself" in said
    assert "deletes nvidia.com/gpu-driver-upgrade-state from the nodes of nvidiadriver/infer" in said
