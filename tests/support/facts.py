"""GPU nodes as NFD and GFD label them, for the model's tests."""

from __future__ import annotations

from gpualign.base import labels as L
from gpualign.loaders.rules import load_rules
from gpualign.model.facts import node_facts

RULES = load_rules()


REPO = "reg.local/nvidia/driver"


def gpu(name: str, kernel: str = "5.15.0-124-generic", os_version: str = "22.04", **extra: str):
    labels = {L.GPU_PRESENT: "true", L.KERNEL: kernel, L.OS_ID: "ubuntu", L.OS_VERSION: os_version,
              L.DRIVER_CURRENT_FULL: "580.95.05", **extra}
    return node_facts({"metadata": {"name": name, "labels": labels}})
