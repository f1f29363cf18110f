"""NodeMaintenance objects (k8s-operator-libs' requestor mode, NVIDIA's maintenance operator), shaped as
`maintenance.nvidia.com/v1alpha1` writes them: who holds a node, said in one line, and never walked behind."""

from __future__ import annotations

from gpualign.upgrade.maintenance import holders


def nm(name: str, node: str, requestor: str, *more: str, deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": "default", **({"deletionTimestamp": "2026-12-05T07:00:00Z"} if deleting
                                                     else {})}
    return {"apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance", "metadata": meta,
            "spec": {"nodeName": node, "requestorID": requestor, "additionalRequestors": list(more), "cordon": True,
                     "drainSpec": {"force": True, "podSelector": "", "timeoutSeconds": 300, "deleteEmptyDir": True},
                     "waitForPodCompletion": {"podSelector": "app=mpi", "timeoutSeconds": 0}}}


def test_each_node_names_who_holds_it_and_a_deleted_maintenance_holds_nothing():
    found = holders([nm("gpu-a1-network", "gpu-a1", "nvidia.network.operator", "nvidia.gpu.operator"),
                     nm("gpu-a2-network", "gpu-a2", "nvidia.network.operator", deleting=True),
                     {"metadata": {"name": "broken"}, "spec": {}}])
    assert found == {"gpu-a1": "NodeMaintenance default/gpu-a1-network (requestor nvidia.network.operator, "
                               "nvidia.gpu.operator)"}


def test_the_walk_holds_a_node_the_maintenance_operator_holds_and_status_names_it():
    from gpualign.upgrade import states as S
    from gpualign.upgrade import upgrade_policy as pol
    from gpualign.upgrade.planner import MAINTENANCE_HOLD, NodeView, next_actions

    held = "NodeMaintenance default/gpu-a1-network (requestor nvidia.network.operator)"
    views = [NodeView("gpu-a1", S.REQUIRED, False, maintenance=held), NodeView("gpu-a2", S.REQUIRED, False)]
    actions = {a.node: a for a in next_actions(views, pol.UpgradePolicy(max_parallel_upgrades=2))}
    assert actions["gpu-a1"].kind == "hold" and actions["gpu-a1"].reason == f"{MAINTENANCE_HOLD}: {held}"
    assert actions["gpu-a2"].kind == "start"
