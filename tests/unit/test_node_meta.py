"""The upgrade's snapshot reads node pages through msgspec (gpualign.kube.node_meta.walk_nodes), keeping only what it
reads: the facts, the Ready condition, the cordon and the metadata a walk writes against must come out exactly as
from the whole node, and a page of another shape is read whole."""

from __future__ import annotations

import msgspec
import orjson
import pytest

from gpualign.kube.node_meta import walk_nodes
from gpualign.model.facts import node_facts
from gpualign.upgrade.snapshot import _ready, _walk_nodes


def node(name: str, *, ready: str | None = "True", cordoned: bool = False) -> dict:
    conditions = [{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-12-01T00:00:00Z"})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "42",
                     "labels": {"nvidia.com/gpu.present": "true",
                                "feature.node.kubernetes.io/kernel-version.full": "5.15.0-124-generic",
                                "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                                "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
                                "nvidia.com/gpu-driver-upgrade-state": "upgrade-required"},
                     "annotations": {"nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable": "false"},
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]} if cordoned else
                {"podCIDR": "10.0.0.0/24"},
        "status": {"conditions": conditions, "images": [{"names": ["x"], "sizeBytes": 1}],
                   "capacity": {"nvidia.com/gpu": "8"}},
    }


NODES = [node("a"), node("b", cordoned=True), node("c", ready="False"), node("d", ready=None),
         {"metadata": {"name": "bare"}}]


def page(items: list) -> bytes:
    return orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                         "items": items})


def test_what_a_snapshot_reads_is_the_same_from_the_trimmed_node_as_from_the_whole_one():
    trimmed = walk_nodes(page(NODES))
    assert [node_facts(t) for t in trimmed] == [node_facts(n) for n in NODES]
    assert [_ready(t) for t in trimmed] == [_ready(n) for n in NODES] == [True, True, False, False, False]
    assert trimmed[0]["metadata"] == {"name": "a", "uid": "uid-a", "resourceVersion": "42",
                                      "labels": NODES[0]["metadata"]["labels"],
                                      "annotations": NODES[0]["metadata"]["annotations"]}
    assert "managedFields" not in orjson.dumps(trimmed).decode() and "images" not in orjson.dumps(trimmed).decode()


def test_a_page_of_another_shape_is_read_whole():
    odd = [{"metadata": {"name": "n", "labels": {"count": 8}}}]  # a number where the API writes strings
    with pytest.raises(msgspec.ValidationError):
        walk_nodes(page(odd))
    assert _walk_nodes(page(odd)) == odd
