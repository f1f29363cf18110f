"""Which nodes are GPU nodes, as the GPU Operator finds them: an NVIDIA PCI device NFD labels, gpu.present, or a
driver pod of the operator's on the node (gpualign.model.facts.GPU_LABELS, gpualign.kube.inventory)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpualign.base import labels as L
from gpualign.kube import inventory
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.facts import GPU_LABELS, from_labels
from tests.support import builders


class OnePageKube:
    """A cluster of one page of nodes, as the API server sends a metadata-only LIST."""

    server = "https://127.0.0.1:1"

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.body = json.dumps({"items": nodes}).encode()
        self.asked: list[str | None] = []

    def list_pages(self, path: str, *, label_selector: str | None = None, decode: Any = None, **_: Any):
        self.asked.append(label_selector)
        yield decode(self.body)


@given(st.dictionaries(st.sampled_from([*GPU_LABELS, L.KERNEL, "other"]), st.sampled_from(["true", "false", ""]),
                       max_size=5))
def test_any_nvidia_label_makes_a_gpu_node(labels):
    assert from_labels("n", labels, {}).gpu == any(labels.get(k) == "true" for k in GPU_LABELS)


def test_a_node_with_only_the_pci_label_or_only_a_driver_pod_is_a_gpu_node():
    pci = builders.node("dra-1", base=False, **{L.PCI_NVIDIA: "true", L.KERNEL: "6.1.0-57-amd64"})
    pod_only = builders.node("dra-2", base=False, **{L.KERNEL: "6.1.0-57-amd64"})
    cpu = builders.node("cpu-1", base=False)
    classic = builders.node("gpu-1")
    kube = OnePageKube([pci, pod_only, cpu, classic])
    others: dict[str, Any] = {}
    found = inventory.gpu_node_facts(kube, None, others=others)
    assert [f.name for f in found] == ["dra-1", "gpu-1"] and set(others) == {"dra-2", "cpu-1"}
    assert kube.asked == [None]  # no label selector can ask for one label or another: filtered here
    pod = DriverPod("gpu-operator/d", "r/driver:535-6.1.0-57-amd64-debian12", "535-6.1.0-57-amd64-debian12",
                    "ImagePullBackOff", False)
    more = inventory.with_driver_pods(others, {"dra-2": pod, "gone": pod})
    assert [(f.name, f.gpu) for f in more] == [("dra-2", True)]
