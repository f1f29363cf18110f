"""Which pods ask for NVIDIA GPUs, one rule for the upgrade walk's evictions, `cuda inject` and (in CEL) the
admission policy (gpualign.model.cuda_policy). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-")  # a resource name starting with one of these is a GPU


def gpu_request(spec: Mapping[str, Any]) -> str | None:
    """How a pod spec asks for NVIDIA GPUs: "resources" (a container's or init container's nvidia.com/gpu* or
    nvidia.com/mig-* limit or request), "runtime" (a runtimeClass naming nvidia: the operator's own test of
    requests misses these, gpu-operator #2570), "claims" (DRA resource claims, and neither of the others); None:
    not a GPU pod."""
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = c.get("resources") if isinstance(c, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for part in ("limits", "requests"):
            asked = resources.get(part)
            if isinstance(asked, Mapping) and any(str(k).startswith(GPU_RESOURCES) for k in asked):
                return "resources"
    if "nvidia" in str(spec.get("runtimeClassName") or ""):
        return "runtime"
    if spec.get("resourceClaims"):
        return "claims"
    return None
