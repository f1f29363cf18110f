"""Tainting a node's GPUs in place of cordoning it (pure): the DeviceTaintRule, the discovery read, the devices'
pools and taints as NVIDIA's DRA driver publishes them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.model.dra_devices import devices_by_node
from gpualign.upgrade.device_taint import KEY, rule, rule_name, serves_rules
from tests.support.dra import SLICE


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True))
def test_a_rule_name_is_a_valid_object_name_for_every_node_name(node):
    name = rule_name(node)
    assert len(name) <= 253 and name.startswith("gpualign-upgrade-")
    assert rule_name(node) == name  # the same node, the same rule: a resumed walk finds it


def test_the_rule_taints_every_gpu_of_the_nodes_pool_noschedule():
    made = rule("dra-p1", "dra-p1", "580-5.15.0-124-generic-ubuntu22.04")
    assert made["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "dra-p1"}
    assert made["spec"]["taint"] == {"key": KEY, "value": "580-5.15.0-124-generic-ubuntu22.04",
                                     "effect": "NoSchedule"}
    assert len(made["spec"]["taint"]["value"]) <= 63  # a taint's value is a label value


def test_only_a_cluster_listing_devicetaintrules_is_asked_to_taint_devices():
    assert serves_rules({"kind": "APIResourceList", "resources": [{"name": "resourceslices"},
                                                                  {"name": "devicetaintrules"}]})
    assert not serves_rules({"kind": "APIResourceList", "resources": [{"name": "resourceslices"}]})
    assert not serves_rules(None)


def test_the_pool_and_the_drivers_health_taints_are_read_from_the_slice():
    import copy

    sliced = copy.deepcopy(SLICE)
    sliced["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},
                                              {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"}]
    devices = devices_by_node([sliced])["dra-1"]
    assert {d.pool for d in devices} == {"dra-1"}
    assert devices[0].taints == ("gpu.nvidia.com/xid=79:NoSchedule", "gpu.nvidia.com/gpu-lost:NoExecute")
    assert devices[0].as_dict()["taints"] == list(devices[0].taints)


def test_a_rule_the_walk_cannot_delete_holds_the_node_instead_of_calling_it_done():
    """The end of a DRA node's walk deletes its rule; refused (RBAC), the walk must not finish with the GPUs still
    tainted: it blocks, naming the rule. Deleted (or already gone), the node is done, never uncordoned."""
    from gpualign.model.facts import node_facts
    from gpualign.upgrade import states as S
    from gpualign.upgrade import upgrade_policy as pol
    from gpualign.upgrade.executor import Executor
    from gpualign.upgrade.planner import NodeView
    from gpualign.upgrade.snapshot import NodeState

    node = {"metadata": {"name": "dra-p1", "resourceVersion": "7", "labels": {S.STATE_LABEL: S.UNCORDON},
                         "annotations": {S.DEVICE_TAINT: "gpualign-upgrade-dra-p1"}}, "spec": {}}

    class Cluster:
        def __init__(self, answer: int) -> None:
            self.answer, self.patches, self.deleted = answer, [], []

        def get(self, _path: str) -> dict:
            return node

        def delete(self, path: str, **_: object) -> int:
            self.deleted.append(path)
            return self.answer

        def patch(self, _path: str, body: dict) -> dict:
            self.patches.append(body)
            return {}

        def event(self, *_: object, **__: object) -> None:
            pass

    view = NodeView("dra-p1", S.UNCORDON, False, target_tag="580-k")
    for answer, done in ((403, False), (200, True), (404, True)):
        cluster = Cluster(answer)
        Executor(cluster, pol.UpgradePolicy()).uncordon(  # type: ignore[arg-type]
            NodeState(node, node_facts(node), None, None, "580-k", view))
        assert cluster.deleted == ["/apis/resource.k8s.io/v1/devicetaintrules/gpualign-upgrade-dra-p1"]
        (written,) = cluster.patches
        if done:
            assert written["metadata"]["labels"][S.STATE_LABEL] == S.DONE and "spec" not in written
        else:
            assert S.STATE_LABEL not in (written["metadata"].get("labels") or {})
            assert "could not be deleted (HTTP 403" in written["metadata"]["annotations"][S.BLOCKER]
