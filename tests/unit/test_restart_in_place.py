"""GPU Operator v26 restarts a driver pod in place when its configuration is unchanged: the running pod and the
DaemonSet's template carry the same DRIVER_CONFIG_DIGEST (set by the operator on the k8s-driver-manager init
container and the nvidia-driver-ctr container, controllers/object_controls.go; an FNV-32a hash printed in decimal).
gpualign's walk does the same: cordoned, no pod evicted, the driver pod restarted. And a third-party GPU client
(placed on nvidia.com/gpu.deploy.client=true) is a GPU user the walk moves."""

from __future__ import annotations

import copy
from typing import Any

from gpualign.model.driver_config import RESTART_IN_PLACE, config_digest, restart_only
from gpualign.model.facts import node_facts
from gpualign.model.gpu_pods import gpu_client
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S
from gpualign.upgrade import upgrade_policy as pol
from gpualign.upgrade.budget import Budget
from gpualign.upgrade.executor import Executor
from gpualign.upgrade.planner import NodeView, next_actions
from gpualign.upgrade.snapshot import NodeState, Pool


def driver_spec(digest: str | None, image: str = "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04") -> dict[str, Any]:
    """A driver pod spec as v26's operator renders it (abridged to the parts that matter here)."""
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    with_digest = [*env, {"name": "DRIVER_CONFIG_DIGEST", "value": digest}] if digest else env
    return {"initContainers": [{"name": "k8s-driver-manager", "image": "nvcr.io/nvidia/cloud-native/"
                                "k8s-driver-manager:v0.9.1", "env": [{"name": "ENABLE_GPU_POD_EVICTION",
                                                                     "value": "true"}, *with_digest[1:]]}],
            "containers": [{"name": "nvidia-driver-ctr", "image": image, "env": with_digest}]}


def test_the_digest_is_read_from_the_init_container_first_and_compared_on_both_sides():
    assert config_digest(driver_spec("2864711503")) == "2864711503"
    only_driver = driver_spec("2864711503")
    only_driver["initContainers"][0]["env"] = []
    assert config_digest(only_driver) == "2864711503"
    assert config_digest(driver_spec(None)) is None and config_digest(None) is None
    assert restart_only(driver_spec("2864711503"), driver_spec("2864711503"))
    assert not restart_only(driver_spec("2864711503"), driver_spec("118273645"))  # the configuration changed
    assert not restart_only(driver_spec(None), driver_spec("2864711503"))  # a pod of an older operator
    assert not restart_only(driver_spec("2864711503"), driver_spec(None))
    assert not restart_only(driver_spec(None), driver_spec(None))


def test_a_restart_in_place_is_admitted_past_pdbs_and_unmovable_pods_it_would_never_touch():
    saturated = {"ml/trainer": Budget("ml/trainer", 0)}
    base = NodeView("n1", S.REQUIRED, False, target_tag="580-k", pdb_demand=(("ml/trainer", 1),),
                    unmovable=("ml/bare has no controller: …",))
    policy = pol.UpgradePolicy(admission=pol.PDB_AWARE)
    (held,) = next_actions([base], policy, saturated)
    assert held.kind == "hold"
    (started,) = next_actions([NodeView(**{**base.__dict__, "restart_only": True})], policy, saturated)
    assert started.kind == "start"


class RecordingKube:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}


def node_state(*, in_place: bool) -> NodeState:
    node = {"metadata": {"name": "n1", "resourceVersion": "7", "labels": {S.STATE_LABEL: S.REQUIRED}}, "spec": {}}
    pod = {"metadata": {"name": "nvidia-driver-x", "namespace": "gpu-operator",
                        "labels": {"controller-revision-hash": "old"}}, "spec": driver_spec("2864711503")}
    ds = {"metadata": {"name": "nvidia-driver-daemonset", "namespace": "gpu-operator", "uid": "u"},
          "spec": {"template": {"metadata": {"labels": {"helm.sh/chart": "gpu-operator-v26.7.0"}},
                                "spec": copy.deepcopy(pod["spec"])}}}
    view = NodeView("n1", S.REQUIRED, False, target_tag="580.105.08-ubuntu22.04", restart_only=in_place)
    return NodeState(node, node_facts(node), pod, Pool(ds, "new"), "580.105.08-ubuntu22.04", view)


def test_the_walk_cordons_a_restart_in_place_and_goes_straight_to_the_pod_restart():
    kube, said = RecordingKube(), []
    ex = Executor(kube, pol.UpgradePolicy(), report=lambda node, msg: said.append(msg))  # type: ignore[arg-type]
    ns = node_state(in_place=True)
    (action,) = next_actions([ns.view], ex.policy)
    ex.apply(action, ns)
    (path, body), = kube.patches
    assert path == "/api/v1/nodes/n1" and body["spec"] == {"unschedulable": True}
    assert body["metadata"]["labels"] == {S.STATE_LABEL: S.POD_RESTART}
    assert body["metadata"]["annotations"][S.TARGET] == "580.105.08-ubuntu22.04"
    assert said == [f"{S.REQUIRED} → {S.POD_RESTART}: admitted and cordoned: {RESTART_IN_PLACE}"]
    kube.patches.clear()
    ex.apply(action, node_state(in_place=False))  # the full walk: cordon-required, evictions to come
    assert kube.patches[0][1]["metadata"]["labels"] == {S.STATE_LABEL: S.CORDON}


def client_pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "agent-x", "namespace": "monitoring", "ownerReferences": [
        {"kind": "ReplicaSet", "name": "agent", "controller": True}]}, "status": {"phase": "Running"},
        "spec": {"containers": [{"name": "agent", "image": "vendor/gpu-agent:1"}], **spec}}


def test_a_third_party_gpu_client_is_a_gpu_user_the_walk_moves():
    by_selector = client_pod({"nodeSelector": {"nvidia.com/gpu.deploy.client": "true"}})
    by_affinity = client_pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.deploy.client", "operator": "In",
                                                     "values": ["true"]}]}]}}}})
    paused = client_pod({"nodeSelector": {"nvidia.com/gpu.deploy.client": "paused-for-driver-upgrade"}})
    plain = client_pod({"nodeSelector": {"kubernetes.io/os": "linux"}})
    assert gpu_client(by_selector["spec"]) and gpu_client(by_affinity["spec"])
    assert not gpu_client(paused["spec"]) and not gpu_client(plain["spec"])
    moved = P.to_move([by_selector, by_affinity, paused, plain], drain=False)
    assert [p["spec"] for p in moved] == [by_selector["spec"], by_affinity["spec"]]
