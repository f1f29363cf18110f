"""A node's driver pod as check sees it: image, tag and how it is doing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DriverPod:
    """The driver pod seen on a node: its image tag and how it is doing (Running, ImagePullBackOff, …)."""

    name: str
    image: str
    tag: str
    state: str
    ready: bool

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> DriverPod:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        containers = spec.get("containers") or [{}]
        image = str(containers[0].get("image", ""))
        last = image.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        state = str(status.get("phase") or "Unknown")
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                state = str(waiting["reason"])
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return cls(f"{meta.get('namespace')}/{meta.get('name')}", image, tag, state, ready)
