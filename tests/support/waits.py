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




def scheduled(kube, namespace: str, app: str, count: int, timeout: float = 30.0) -> list[dict]:  # noqa: ANN001 - Kube
    """The `count` pods labelled app=APP, once every one of them is bound to a node."""
    return wait_for(lambda: (ps := kube.pods(namespace, label_selector=f"app={app}")) and len(ps) == count
                    and all(p["spec"].get("nodeName") for p in ps) and ps, timeout=timeout,
                    what=f"{count} scheduled pods of {app}")


def unscheduled(kube, namespace: str, app: str, timeout: float = 30.0) -> str:  # noqa: ANN001 - Kube
    """The scheduler's reason (its first FailedScheduling event) for the pods labelled app=APP, once it has said it,
    and every one of them still Pending on no node."""
    events = wait_for(lambda: [e for e in kube.list_raw(f"/api/v1/namespaces/{namespace}/events")
                               if e["reason"] == "FailedScheduling"
                               and e["involvedObject"]["name"].startswith(app)], timeout=timeout,
                      what=f"FailedScheduling for {app}")
    pods = kube.pods(namespace, label_selector=f"app={app}")
    assert pods and all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName") for p in pods)
    return str(events[0]["message"])
