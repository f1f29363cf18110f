"""Small polling helpers for tests against the real control plane."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.25,
             what: str = "condition") -> T:
    """Poll until probe() returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def pod_events(kube, pod: dict, reason: str, timeout: float = 30.0) -> list[dict]:  # noqa: ANN001 - Kube
    """The pod's events with that reason, waited for: the kubelet (and the lab's driver simulator) records an event
    after the status it explains, so a reader that has just seen the status can be first."""
    meta = pod["metadata"]

    def found() -> list[dict]:
        return [e for e in kube.list_raw(f"/api/v1/namespaces/{meta['namespace']}/events")
                if e["involvedObject"]["name"] == meta["name"] and e["reason"] == reason]

    return wait_for(found, timeout=timeout, what=f"a {reason} event for pod {meta['namespace']}/{meta['name']}")


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


