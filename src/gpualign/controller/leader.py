"""Leader election on a coordination.k8s.io/v1 Lease (lightkube has none): one replica acts, the other stands by.

Defaults follow client-go: 15 s lease, 10 s renew deadline, 2 s retry. Writes are guarded by the Lease's
resourceVersion, so two candidates never both win a takeover.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpualign.errors import GpualignError
from gpualign.kube import Kube

log = logging.getLogger("gpualign.controller")


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class LeaseElector(threading.Thread):
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *, lease_seconds: float = 15,
                 renew_seconds: float = 10, retry_seconds: float = 2, stop: threading.Event,
                 on_change: Callable[[bool], None] = lambda _leader: None) -> None:
        super().__init__(name="leader-election", daemon=True)
        self.kube, self.namespace, self.lease_name, self.identity = kube, namespace, name, identity
        self.lease_seconds, self.renew_seconds, self.retry_seconds = lease_seconds, renew_seconds, retry_seconds
        self.stop_event, self.on_change = stop, on_change
        self.leader = False
        self.transitions = 0
        self._last_renew = 0.0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.lease_name}"

    def _spec(self, now: dt.datetime, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": acquired or _micro(now), "renewTime": _micro(now), "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        lease = self.kube.get(self.path)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.lease_name, "namespace": self.namespace}, "spec": self._spec(now, 0)}
            resp = self.kube.request("POST", self.path.rsplit("/", 1)[0], body=body)
            return resp.status_code == 201
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.lease_name, "namespace": self.namespace,
                             "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": self._spec(now, transitions, acquired)}
        resp = self.kube.request("PUT", self.path, body=body)
        return resp.status_code == 200  # 409: someone else wrote first

    def _set(self, leader: bool) -> None:
        if leader != self.leader:
            self.leader = leader
            self.transitions += 1
            log.info("%s: %s", self.identity, "became the leader" if leader else "lost the lease: standing by")
            self.on_change(leader)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                ok = self.try_acquire_or_renew()
            except GpualignError as err:
                log.warning("lease %s/%s: %s", self.namespace, self.lease_name, err.message)
                ok = False
            if ok:
                self._last_renew = time.monotonic()
                self._set(True)
            elif self.leader and time.monotonic() - self._last_renew > self.renew_seconds:
                self._set(False)  # could not renew within the deadline: stop acting before the lease lapses
            wait = (self.lease_seconds - self.renew_seconds) if self.leader else self.retry_seconds
            self.stop_event.wait(max(0.2, min(wait, self.retry_seconds)))

    def release(self) -> None:
        """On a clean shutdown, give the lease up at once so the standby takes over without waiting."""
        if not self.leader:
            return
        try:
            lease = self.kube.get(self.path)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["renewTime"] = _micro(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
                lease["spec"]["holderIdentity"] = ""
                self.kube.request("PUT", self.path, body=lease)
        except GpualignError:
            pass
        self._set(False)
