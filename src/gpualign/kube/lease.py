"""Leases on coordination.k8s.io/v1 (lightkube has none), below every feature that needs one: the controller's leader
election (one replica acts, the other stands by), the upgrade walk's lock and ensure's lock across machines.

Defaults follow client-go: 15 s lease, 10 s renew deadline, 2 s retry. Writes are guarded by the Lease's
resourceVersion, so two candidates never both win a takeover.

Never silent: a Lease that cannot be read or written (its namespace missing, RBAC forbidding it, any other refusal)
is an error-level line naming the cause, once per cause, and `problem` says it for the readiness probe and the
metrics. `check_writable` tells the certain causes (namespace missing, forbidden) before the controller starts.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpualign.base.errors import BadInput, GpualignError
from gpualign.kube.client import Kube
from gpualign.kube.refusals import status_message

log = logging.getLogger("gpualign.controller")


class LeaseNamespaceMissing(BadInput):
    """The Lease's namespace does not exist (the message says how to create it)."""

    def __init__(self, message: str, namespace: str) -> None:
        super().__init__(message)
        self.namespace = namespace


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> dt.datetime | None:
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
        self.problem: str | None = None  # why the Lease cannot be read or written now; None while it can
        self.problem_since = 0.0
        self.released = False

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.lease_name}"

    def _spec(self, now: dt.datetime, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": acquired or _micro(now), "renewTime": _micro(now), "leaseTransitions": transitions}

    def _refusal(self, verb: str, status: int, message: str) -> str:
        where = f"Lease {self.namespace}/{self.lease_name}"
        if status == 404 and "namespace" in message.lower():
            return (f"{where}: namespace {self.namespace} does not exist: create it (kubectl create namespace "
                    f"{self.namespace})")
        if status == 403:
            return f"{where}: forbidden to {verb} it ({message}): grant the controller's Role on leases"
        return f"{where}: {verb} refused: HTTP {status}: {message}"

    def check_writable(self) -> None:
        """Before starting: a Lease namespace that does not exist, or RBAC that forbids the Lease, is certain to
        keep this replica from ever leading. BadInput (exit 2) then, naming the cause. A dry-run create asks the
        API server itself, without writing anything."""
        resp = self.kube.request("GET", self.path)
        if resp.status_code == 200:
            return
        if resp.status_code == 404:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.lease_name, "namespace": self.namespace},
                    "spec": self._spec(dt.datetime.now(dt.UTC), 0)}
            resp = self.kube.request("POST", self.path.rsplit("/", 1)[0], params={"dryRun": "All"}, body=body)
            if resp.status_code in (200, 201, 409):
                return
            verb = "create"
        else:
            verb = "read"
        if resp.status_code == 404 and "namespace" in status_message(resp).lower():
            raise LeaseNamespaceMissing(self._refusal(verb, resp.status_code, status_message(resp)), self.namespace)
        if resp.status_code in (403, 404):
            raise BadInput(self._refusal(verb, resp.status_code, status_message(resp)))

    def _trouble(self, problem: str | None) -> None:
        """Say a new problem once at error level, and its end once; keep it for readiness and the metrics."""
        if problem == self.problem:
            return
        if problem:
            log.error("leader election: %s (this replica cannot lead until it is fixed; retrying every %.0fs)",
                      problem, self.retry_seconds)
            self.problem_since = time.monotonic()
        else:
            log.info("leader election: Lease %s/%s readable and writable again", self.namespace, self.lease_name)
        self.problem = problem

    def try_acquire_or_renew(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        got = self.kube.request("GET", self.path)
        if got.status_code not in (200, 404):
            self._trouble(self._refusal("read", got.status_code, status_message(got)))
            return False
        lease = got.json() if got.status_code == 200 else None
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.lease_name, "namespace": self.namespace}, "spec": self._spec(now, 0)}
            resp = self.kube.request("POST", self.path.rsplit("/", 1)[0], body=body)
            if resp.status_code not in (201, 409):  # 409: another candidate created it first
                self._trouble(self._refusal("create", resp.status_code, status_message(resp)))
                return False
            self._trouble(None)
            return resp.status_code == 201
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder != self.identity and not expired:
            self._trouble(None)  # readable, and held by a live replica: standing by is no problem
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.lease_name, "namespace": self.namespace,
                             "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": self._spec(now, transitions, acquired)}
        resp = self.kube.request("PUT", self.path, body=body)
        if resp.status_code not in (200, 409):  # 409: someone else wrote first
            self._trouble(self._refusal("update", resp.status_code, status_message(resp)))
            return False
        self._trouble(None)
        return resp.status_code == 200

    def _set(self, leader: bool) -> None:
        if leader != self.leader:
            self.leader = leader
            self.transitions += 1
            log.info("%s: %s", self.identity, "became the leader" if leader else
                     "released the lease" if self.released else "lost the lease: standing by")
            self.on_change(leader)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                ok = self.try_acquire_or_renew()
            except GpualignError as err:
                self._trouble(f"Lease {self.namespace}/{self.lease_name}: {err.message}")
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
        self.released = True
        self._set(False)
