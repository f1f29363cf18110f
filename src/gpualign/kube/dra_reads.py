"""NVIDIA's DRA devices, read from the cluster's ResourceSlices: where gpu-feature-discovery does not run (the GPU
Operator's DRA mode), a node's driver version is there, not in its labels (gpualign.model.dra_devices)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpualign.base.errors import Forbidden, NotFound
from gpualign.model.dra_devices import GpuDevice, devices_by_node, highest_driver
from gpualign.model.dra_floor import DRIVER
from gpualign.model.version import DriverVersion

PATH = "/apis/resource.k8s.io/v1/resourceslices"


@dataclass(frozen=True)
class DraDevices:
    """node -> NVIDIA's devices on it; `note` says why none could be read (RBAC), empty when the cluster serves no
    DRA (Kubernetes before 1.34) or has no NVIDIA DRA driver."""

    by_node: dict[str, list[GpuDevice]]
    note: str | None = None

    @cached_property
    def drivers(self) -> dict[str, DriverVersion]:
        """node -> the highest driver its devices publish (worked out once, however many pages ask)."""
        return {n: d for n, devices in self.by_node.items() if (d := highest_driver(devices))}


def read(kube: Any) -> DraDevices:
    """One LIST of the ResourceSlices NVIDIA's DRA driver wrote (a field selector on the driver: a cluster without
    it answers an empty list)."""
    try:
        return DraDevices(devices_by_node(kube.list_raw(PATH, field_selector=f"spec.driver={DRIVER}")))
    except NotFound:
        return DraDevices({})
    except Forbidden as err:
        return DraDevices({}, f"NVIDIA's DRA devices not read (a node without GFD labels has no known driver): "
                              f"{err.message}")
