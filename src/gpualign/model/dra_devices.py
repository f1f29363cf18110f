"""NVIDIA's GPUs as its DRA driver publishes them in ResourceSlices (resource.k8s.io/v1). Pure.

In the GPU Operator's DRA mode no gpu-feature-discovery runs, so a node's driver version is not in its labels: it
is in the ResourceSlices NVIDIA's DRA driver writes for the node (driver `gpu.nvidia.com`, `spec.nodeName`), one
device per GPU or MIG device, with the semver attributes `driverVersion` and `cudaDriverVersion`
(k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go). A device attribute is one of `string`, `int`, `bool`
or `version`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpualign.model.dra_floor import DRIVER
from gpualign.model.version import DriverVersion


@dataclass(frozen=True)
class GpuDevice:
    """One device NVIDIA's DRA driver publishes."""

    node: str
    name: str  # gpu-0, gpu-0-mig-9-4-4
    type: str  # gpu, mig (vfio devices carry no driver version)
    driver: DriverVersion | None
    cuda: str | None  # the CUDA version the driver supports (cudaDriverVersion), as published
    product: str | None
    pool: str = ""  # the ResourceSlice's pool (NVIDIA's DRA driver names it after the node)
    taints: tuple[str, ...] = ()  # the device's taints as the driver writes them: KEY[=VALUE]:EFFECT

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "driver": str(self.driver) if self.driver else None,
                "cuda": self.cuda, "product": self.product, **({"taints": list(self.taints)} if self.taints else {})}


def _attribute(attributes: Mapping[str, Any], name: str) -> Any:
    """An attribute's value whichever of its four fields holds it; a name may be qualified by the driver's domain."""
    value = attributes.get(name, attributes.get(f"{DRIVER}/{name}"))
    if not isinstance(value, Mapping):
        return None
    for field in ("version", "string", "int", "bool"):
        if field in value:
            return value[field]
    return None


def _driver(text: Any) -> DriverVersion | None:
    try:
        return DriverVersion.parse(str(text)) if text is not None else None
    except ValueError:
        return None


def devices_by_node(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[GpuDevice]]:
    """node -> the NVIDIA devices its slices publish (slices of other drivers, and ones bound to no node, are
    not read)."""
    out: dict[str, list[GpuDevice]] = {}
    for item in slices:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if not isinstance(spec, Mapping) or spec.get("driver") != DRIVER or not spec.get("nodeName"):
            continue
        node = str(spec["nodeName"])
        pool = spec.get("pool")
        pool_name = str(pool.get("name") or "") if isinstance(pool, Mapping) else ""
        for device in spec.get("devices") or []:
            if not isinstance(device, Mapping):
                continue
            attributes = device.get("attributes") or {}
            kind = _attribute(attributes, "type")
            out.setdefault(node, []).append(GpuDevice(
                node=node, name=str(device.get("name") or "?"), type=str(kind or "gpu"),
                driver=_driver(_attribute(attributes, "driverVersion")),
                cuda=str(c) if (c := _attribute(attributes, "cudaDriverVersion")) is not None else None,
                product=str(p) if (p := _attribute(attributes, "productName")) is not None else None,
                pool=pool_name, taints=_taints(device.get("taints"))))
    return out


def _taints(raw: Any) -> tuple[str, ...]:
    """A device's taints (resource.k8s.io/v1 DeviceTaint: key, value, effect) as KEY[=VALUE]:EFFECT."""
    out = []
    for taint in raw if isinstance(raw, list) else []:
        if isinstance(taint, Mapping) and taint.get("key"):
            value = f"={taint['value']}" if taint.get("value") else ""
            out.append(f"{taint['key']}{value}:{taint.get('effect') or '?'}")
    return tuple(out)


def highest_driver(devices: Iterable[GpuDevice]) -> DriverVersion | None:
    drivers = [d.driver for d in devices if d.driver is not None]
    return max(drivers) if drivers else None
