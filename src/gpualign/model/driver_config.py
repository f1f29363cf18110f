"""Whether a driver pod out of step with its DaemonSet needs only a restart in place. Pure.

GPU Operator v26 sets `DRIVER_CONFIG_DIGEST` on its driver containers: a hash of every field that changes what the
driver installs (images, kernel module type and parameters, repository configuration, certificates, secrets, …;
gpu-operator internal/config/driver_config_digest.go). When the running pod and the DaemonSet's template carry the
same digest, what changed is only bookkeeping (a chart label, say), and the operator's upgrade controller cordons the
node and restarts the driver pod in place, skipping pod deletion and drain (internal/predicates/restart_only.go,
k8s-operator-libs' RestartOnlyPredicate). A digest missing on either side is the full walk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DIGEST_ENV = "DRIVER_CONFIG_DIGEST"
# The reason a restart-only walk gives, in status and why.
RESTART_IN_PLACE = "restart in place: the driver's configuration is unchanged (DRIVER_CONFIG_DIGEST), no pod moved"


def config_digest(pod_spec: Mapping[str, Any] | None) -> str | None:
    """The digest a driver pod spec carries: the first non-empty value, init containers first (the operator sets
    the same value on every driver container)."""
    if not isinstance(pod_spec, Mapping):
        return None
    for part in ("initContainers", "containers"):
        for container in pod_spec.get(part) or []:
            for env in (container.get("env") or []) if isinstance(container, Mapping) else []:
                if isinstance(env, Mapping) and env.get("name") == DIGEST_ENV and env.get("value"):
                    return str(env["value"])
    return None


def restart_only(running: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> bool:
    """Whether the running pod's spec and the desired template's differ only where the operator restarts in place."""
    ran, wanted = config_digest(running), config_digest(desired)
    return ran is not None and ran == wanted
