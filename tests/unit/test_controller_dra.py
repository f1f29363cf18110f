"""The controller watches the ResourceSlices of NVIDIA's DRA driver: in the GPU Operator's DRA mode no
gpu-feature-discovery runs, so a node's driver version is there, and a node its slices publish GPUs for is a GPU node.
The slices are shaped as k8s-dra-driver-gpu's kubelet plugin writes them (tests/support/dra.py)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from gpualign.base.errors import NotFound
from gpualign.controller.caches import Caches
from gpualign.kube.watch import Watcher
from gpualign.model.version import DriverVersion
from tests.support import builders
from tests.support.dra import SLICE


def slice_for(node: str, *drivers: str, name: str | None = None) -> dict[str, Any]:
    item = copy.deepcopy(SLICE)
    item["metadata"]["name"] = name or f"{node}-gpu.nvidia.com-x"
    item["spec"]["nodeName"] = node
    item["spec"]["devices"] = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                                                    "driverVersion": {"version": d}}}
                               for i, d in enumerate(drivers)]
    return item


def caches_with(*nodes: dict[str, Any]) -> tuple[Caches, list[str]]:
    requeued: list[str] = []
    caches = Caches(requeue=lambda names: requeued.extend(names))
    caches.sync_nodes(list(nodes))
    requeued.clear()
    return caches, requeued


DRA_NODE = builders.node("dra-1", base=False,
                         **{"feature.node.kubernetes.io/kernel-version.full": "6.12.57+deb13-amd64"})


def test_a_node_its_slices_publish_gpus_for_is_a_gpu_node_with_their_highest_driver():
    caches, requeued = caches_with(builders.node("gpu-1"), DRA_NODE, builders.node("cpu-1", base=False))
    assert caches.node("dra-1") == (None, None)
    caches.sync_slices([slice_for("dra-1", "550.163.1", "580.65.6"), slice_for("cpu-9", "580.65.6")])
    facts, pod = caches.node("dra-1")
    assert facts is not None and facts.gpu and pod is None
    assert facts.driver == DriverVersion(580, 65, 6) and facts.driver_from_dra
    # every node whose driver the slices moved is re-checked (one the caches do not know is forgotten by its check)
    assert sorted(caches.names()) == ["dra-1", "gpu-1"] and sorted(requeued) == ["cpu-9", "dra-1"]
    assert caches.snapshot()["dra-1"].driver == DriverVersion(580, 65, 6)


def test_a_node_gfd_labels_keeps_its_own_driver_whatever_its_slices_say():
    gfd = builders.node("gfd-1", **{"nvidia.com/cuda.driver-version.full": "570.195.03"})
    caches, _ = caches_with(gfd)
    caches.sync_slices([slice_for("gfd-1", "580.65.6")])
    facts, _ = caches.node("gfd-1")
    assert facts is not None and facts.driver == DriverVersion(570, 195, 3) and not facts.driver_from_dra


def test_only_a_change_of_a_nodes_driver_re_checks_it_and_a_deleted_slice_takes_its_gpus_away():
    caches, requeued = caches_with(DRA_NODE, builders.node("dra-2", base=False))
    caches.sync_slices([slice_for("dra-1", "570.195.3"), slice_for("dra-2", "570.195.3")])
    requeued.clear()
    caches.slice_event("MODIFIED", slice_for("dra-1", "570.195.3"))  # a status-like rewrite: same driver
    assert requeued == []
    caches.slice_event("MODIFIED", slice_for("dra-1", "580.65.6"))  # the new driver, after the upgrade
    assert requeued == ["dra-1"] and caches.node("dra-1")[0].driver == DriverVersion(580, 65, 6)
    requeued.clear()
    caches.slice_event("DELETED", slice_for("dra-1", "580.65.6"))
    assert requeued == ["dra-1"] and caches.node("dra-1") == (None, None) and caches.names() == ["dra-2"]


def test_a_node_whose_devices_span_two_slices_takes_the_highest_of_both():
    caches, requeued = caches_with(DRA_NODE)
    caches.slice_event("ADDED", slice_for("dra-1", "550.163.1", name="a"))
    caches.slice_event("ADDED", slice_for("dra-1", "580.65.6", name="b"))
    assert caches.node("dra-1")[0].driver == DriverVersion(580, 65, 6)
    requeued.clear()
    caches.slice_event("DELETED", slice_for("dra-1", "580.65.6", name="b"))
    assert caches.node("dra-1")[0].driver == DriverVersion(550, 163, 1) and requeued == ["dra-1"]


class NoDraKube:
    """An API server before Kubernetes 1.34: resource.k8s.io/v1 answers 404."""

    def __init__(self) -> None:
        self.lists = 0

    def get_json(self, path: str, **_: Any) -> dict[str, Any]:
        self.lists += 1
        raise NotFound(f"GET {path}: HTTP 404")

    def watch_raw(self, path: str, **_: Any):  # noqa: ANN201 - never reached
        raise AssertionError("no watch after a list that was not found")


def test_a_cluster_that_serves_no_dra_is_an_empty_list_asked_again_later_not_an_error(caplog):
    kube, synced, stop = NoDraKube(), [], threading.Event()
    w = Watcher(kube, "/apis/resource.k8s.io/v1/resourceslices", label_selector=None, metadata_only=False,
                on_sync=synced.append, on_event=lambda *_: None, stop=stop, name="watch-resourceslices",
                absent_retry=0.05)
    with caplog.at_level("INFO", logger="gpualign.controller"):
        w.start()
        for _ in range(200):
            if kube.lists >= 3:
                break
            threading.Event().wait(0.01)
        stop.set()
        w.join(5)
    assert kube.lists >= 3 and synced and all(s == [] for s in synced)  # empty, however often it is asked
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert sum("not served here" in r.getMessage() for r in caplog.records) == 1
