"""The CUDA driver floor under Dynamic Resource Allocation. Pure.

Where GPUs are claimed through DRA, a node carries no gpu-feature-discovery labels (the GPU Operator does not run
GFD in its DRA mode), so the floor cannot be a nodeAffinity. It is a device selector instead: NVIDIA's DRA driver
publishes every GPU (and MIG device) in a ResourceSlice under the driver `gpu.nvidia.com`, with the semver
attributes `driverVersion` and `cudaDriverVersion` (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go), and
a claim's request that selects

    device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('550.54.14')) >= 0

is allocated only devices whose driver is at least the toolkit's minimum, by the scheduler itself. The floor is the
same minimum driver the nodeAffinity floor uses (gpualign.model.cuda), so `--minor-compat` means the same here.

A claim asks for NVIDIA GPUs when one of its requests (`exactly`, or a `firstAvailable` alternative) names an NVIDIA
device class: `gpu.nvidia.com` and `mig.nvidia.com` as NVIDIA's DRA driver installs them, and any class a platform
team defines over the driver (named by the caller). VFIO passthrough devices carry no driver version and are not
floored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from gpualign.model.version import DriverVersion

DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver, and the domain of its devices' attributes
NVIDIA_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com"})  # the device classes its Helm chart installs
PREFIX = f"device.attributes['{DRIVER}'].driverVersion.compareTo(semver('"
_FLOOR = re.compile(re.escape(PREFIX) + r"(?P<v>\d+\.\d+\.\d+)'\)\) >= 0")
_NAMES_DRIVER = re.compile(r"""device\.driver\s*==\s*['"]gpu\.nvidia\.com['"]""")


def semver(version: DriverVersion) -> str:
    """A driver version as a semantic version (no leading zeros: 535.104.05 is 535.104.5), as the DRA driver
    publishes it."""
    return f"{version.major}.{version.minor}.{version.rev or 0}"


def floor_expression(minimum: DriverVersion) -> str:
    """The CEL selector that admits only devices whose driver is at least `minimum`."""
    return f"{PREFIX}{semver(minimum)}')) >= 0"


def floor_of(expression: str) -> DriverVersion | None:
    """The minimum a selector gpualign wrote stands for, or None for any other expression."""
    m = _FLOOR.fullmatch(expression.strip())
    return DriverVersion.parse(m.group("v")) if m else None


def nvidia_classes(device_classes: Iterable[Mapping[str, Any]], extra: Iterable[str] = ()) -> frozenset[str]:
    """NVIDIA's own classes, `extra`, and every DeviceClass given whose selectors name NVIDIA's driver."""
    names = set(NVIDIA_CLASSES) | set(extra)
    for dc in device_classes:
        selectors = ((dc.get("spec") or {}).get("selectors") or []) if isinstance(dc, Mapping) else []
        if any(_NAMES_DRIVER.search(str((s.get("cel") or {}).get("expression") or ""))
               for s in selectors if isinstance(s, Mapping)):
            name = (dc.get("metadata") or {}).get("name")
            if name:
                names.add(str(name))
    return frozenset(names)


def device_requests(claim_spec: Mapping[str, Any]) -> Iterator[MutableMapping[str, Any]]:
    """Each device request of a ResourceClaim's spec (resource.k8s.io/v1) that names a device class: an `exactly`
    request, and every `firstAvailable` alternative."""
    devices = claim_spec.get("devices")
    for request in (devices.get("requests") or []) if isinstance(devices, Mapping) else []:
        if not isinstance(request, MutableMapping):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, MutableMapping):
            yield exactly
        for alternative in request.get("firstAvailable") or []:
            if isinstance(alternative, MutableMapping):
                yield alternative


def nvidia_requests(claim_spec: Mapping[str, Any], classes: frozenset[str]) -> list[MutableMapping[str, Any]]:
    return [r for r in device_requests(claim_spec) if r.get("deviceClassName") in classes]


def floors(request: Mapping[str, Any]) -> list[DriverVersion]:
    """The floors gpualign wrote on one request."""
    out = []
    for selector in request.get("selectors") or []:
        found = floor_of(str(((selector or {}).get("cel") or {}).get("expression") or "")) \
            if isinstance(selector, Mapping) else None
        if found is not None:
            out.append(found)
    return out


def set_floor(request: MutableMapping[str, Any], minimum: DriverVersion, make_map: Any = dict) -> None:
    """The request's selectors with gpualign's floor for `minimum`, replacing one written before (idempotent; a
    newer floor replaces an older one). `make_map` builds the new mappings (the YAML round-trip's own type)."""
    kept = [s for s in request.get("selectors") or []
            if not (isinstance(s, Mapping) and floor_of(str((s.get("cel") or {}).get("expression") or "")))]
    selector = make_map()
    cel = make_map()
    cel["expression"] = floor_expression(minimum)
    selector["cel"] = cel
    request["selectors"] = [*kept, selector]


def device_class(name: str, minimum: DriverVersion, cuda: str, kind: str = "gpu",
                 extended_resource: str | None = None) -> dict[str, Any]:
    """A DeviceClass of NVIDIA's `kind` devices (gpu or mig) whose driver is at least `minimum`: a platform team
    hands it out, and a claim through it needs no selector of its own. extended_resource: the resource a pod asks
    for to be allocated this class's devices without a claim (DRA's extended-resource mapping, GA in Kubernetes
    1.37): nvidia.com/gpu floors every such pod of the cluster, a name of one's own the pods that ask for it."""
    spec: dict[str, Any] = {"selectors": [
        {"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"}},
        {"cel": {"expression": floor_expression(minimum)}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpualign"},
                         "annotations": {"gpualign.io/cuda": cuda}},
            "spec": spec}


# What Kubernetes takes as an extended resource's name: a domain-prefixed name outside kubernetes.io, as a pod's
# resources carry it (v1helper.IsExtendedResourceName).
EXTENDED_RESOURCE = re.compile(r"(?=.{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
                               r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def extended_resource_problem(name: str) -> str | None:
    """Why `name` cannot be an extended resource's name, or None."""
    if not EXTENDED_RESOURCE.fullmatch(name):
        return "not a domain-prefixed resource name (e.g. example.com/gpu-cuda-12.8)"
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or domain == "requests":
        return "kubernetes.io names are Kubernetes' own, not extended resources"
    return None
