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


DEPLOY_CLIENT = "nvidia.com/gpu.deploy.client"  # the operator sets it "true" on GPU nodes for third-party clients


def gpu_client(spec: Mapping[str, Any]) -> bool:
    """Whether a pod spec is placed as a third-party GPU client: by a nodeSelector or a required nodeAffinity on
    `nvidia.com/gpu.deploy.client=true`, the label GPU Operator v26 sets on every GPU node for such clients, which
    its driver manager pauses while the driver is replaced. Such a pod holds the GPU without asking for it."""
    if str((spec.get("nodeSelector") or {}).get(DEPLOY_CLIENT)) == "true":
        return True
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term.get("matchExpressions") or []) if isinstance(term, Mapping) else []:
            if not isinstance(expr, Mapping) or expr.get("key") != DEPLOY_CLIENT:
                continue
            if expr.get("operator") == "Exists" or (expr.get("operator") == "In" and "true" in
                                                    (expr.get("values") or [])):
                return True
    return False
