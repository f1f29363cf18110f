"""SIMULATION (lab only): NVIDIA's DRA driver, as the objects it writes.

In the GPU Operator's DRA mode no gpu-feature-discovery runs: a GPU node carries NFD's PCI label and no GFD label,
and NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes its GPUs in a ResourceSlice of its own, driver
`gpu.nvidia.com`, one device `gpu-N` per GPU with the attributes its kubelet plugin writes (deviceinfo.go: `type`,
`uuid`, `productName`, `brand`, `architecture`, `pcieBusID` strings; `cudaComputeCapability`, `driverVersion`,
`cudaDriverVersion` semantic versions) and its memory as capacity. Its Helm chart installs the DeviceClasses
`gpu.nvidia.com` and `mig.nvidia.com`. The lab writes those objects for its DRA nodes; the real kube-scheduler
allocates from them, so a claim's selectors are judged by Kubernetes, not by gpualign.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpualign.lab.scenarios import NodeSpec
from gpualign.model.cuda import table
from gpualign.model.dra_floor import DRIVER, semver

__all__ = ["DRIVER", "cuda_of", "device_classes", "resource_slice"]
from gpualign.model.version import DriverVersion

_ARCHITECTURE = {"H100": ("Hopper", "9.0.0"), "A100": ("Ampere", "8.0.0"), "L4": ("Ada Lovelace", "8.9.0"),
                 "B200": ("Blackwell", "10.0.0")}


def cuda_of(driver: DriverVersion) -> str:
    """The CUDA version a driver supports, as NVML reports it (cudaDriverVersion): the newest CUDA whose minimum
    driver it meets."""
    t = table()
    met = [v for v in t.known if t.minimum[v] <= driver]
    return f"{met[-1]}.0" if met else "11.0.0"


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's DRA driver's chart installs for GPUs and MIG devices."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": f"{kind}.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && "
                                                           f"device.attributes['{DRIVER}'].type == '{kind}'"}}]}}
            for kind in ("gpu", "mig")]


def resource_slice(spec: NodeSpec, driver: str) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA driver writes for a node whose `spec.gpus` GPUs run `driver`."""
    version = DriverVersion.parse(driver)
    product = spec.product.replace("-", " ")
    arch, capability = next((v for k, v in _ARCHITECTURE.items() if k in product), ("Hopper", "9.0.0"))
    devices = []
    for n in range(spec.gpus):
        uuid = hashlib.sha256(f"{spec.name}/{n}".encode()).hexdigest()
        devices.append({
            "name": f"gpu-{n}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"},
                "productName": {"string": product}, "brand": {"string": "Nvidia"},
                "architecture": {"string": arch}, "cudaComputeCapability": {"version": capability},
                "driverVersion": {"version": semver(version)}, "cudaDriverVersion": {"version": cuda_of(version)},
                "pcieBusID": {"string": f"0000:{0x18 + n:02x}:00.0"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        })
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{spec.name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": spec.name,
                     "pool": {"name": spec.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}
