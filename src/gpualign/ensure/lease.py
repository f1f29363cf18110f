"""One image, one builder, across machines: while `gpualign ensure --lease NAMESPACE` works on a tag it holds a
Lease for it on the cluster (as `gpualign upgrade` holds one for the walk), so two runs on different machines never
build the same image twice. On one machine a file lock per tag does the same (run.tag_lock).

The Lease is `gpualign-ensure-<sha256(tag)[:16]>` (a tag can be longer than a name allows; the waiting run names
it); it is renewed while the build runs and given up at once when it ends. A run that finds it held waits, then
looks at the ledger again before building: the other run has usually pushed the image by then. A holder that died
is waited out (the lease lapses after 30 s without renewal).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

from gpualign.base.errors import GpualignError
from gpualign.kube.client import Kube
from gpualign.kube.lease import LeaseElector

LEASE_SECONDS = 30


def lease_name(tag: str) -> str:
    return f"gpualign-ensure-{hashlib.sha256(tag.encode()).hexdigest()[:16]}"


def identity() -> str:
    return f"gpualign-ensure@{socket.gethostname()}/{os.getpid()}"


class Leases:
    """A factory of per-tag Lease holds on one cluster (checked writable before any work)."""

    def __init__(self, kube: Kube, namespace: str, say: Callable[[str, str], None]) -> None:
        self.kube, self.namespace, self.say = kube, namespace, say
        probe = LeaseElector(kube, namespace, lease_name("probe"), identity(), stop=threading.Event())
        probe.check_writable()  # a missing namespace or forbidden Lease: BadInput now, naming it

    @contextlib.contextmanager
    def hold(self, tag: str) -> Iterator[None]:
        stop = threading.Event()
        name = lease_name(tag)
        elector = LeaseElector(self.kube, self.namespace, name, identity(), lease_seconds=LEASE_SECONDS,
                               renew_seconds=LEASE_SECONDS * 2 / 3, retry_seconds=2, stop=stop)
        waiting = False
        while not elector.try_acquire_or_renew():
            if elector.problem:
                raise GpualignError(elector.problem)
            if not waiting:
                self.say(tag, f"waiting: another ensure holds Lease {self.namespace}/{name} for it")
                waiting = True
            time.sleep(2)
        elector.leader = True
        elector.start()
        try:
            yield
        finally:
            stop.set()
            elector.release()
