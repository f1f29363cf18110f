"""One walk at a time: `gpualign upgrade` holds a Lease while it runs, so two processes never share the limits.

The holder identity is `gpualign-upgrade@HOST/PID`. A second process refuses while the holder renews; a holder that
was killed on this host (its pid is gone) is taken over at once, so a restart after SIGKILL resumes immediately,
and a dead holder elsewhere is taken over once its lease expires.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
from collections.abc import Iterator

from gpualign.base.errors import ApiError, Refused, Unreachable
from gpualign.kube.client import Kube
from gpualign.kube.lease import LeaseElector, parse_time


class Busy(Refused):
    """Another walk holds the lock (exit 1: blocked, not bad input)."""


def identity() -> str:
    return f"gpualign-upgrade@{socket.gethostname()}/{os.getpid()}"


def _holder_dead_here(holder: str) -> bool:
    host, _, pid = holder.removeprefix("gpualign-upgrade@").rpartition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextlib.contextmanager
def hold(kube: Kube, namespace: str, name: str = "gpualign-upgrade", lease_seconds: float = 15.0) -> Iterator[None]:
    stop = threading.Event()
    elector = LeaseElector(kube, namespace, name, identity(), lease_seconds=lease_seconds, renew_seconds=10,
                           retry_seconds=2, stop=stop)
    deadline = time.monotonic() + 30
    while True:  # a reset connection on the way in is tried again, as the walk rides out its own
        try:
            acquired = elector.try_acquire_or_renew()
            break
        except (Unreachable, ApiError) as err:
            if not err.retryable or time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    if not acquired:
        lease = kube.get(elector.path) or {}
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder == identity():
            pass  # ours already: an earlier attempt took it and its answer was lost
        elif holder and _holder_dead_here(holder):
            kube.patch(elector.path, {"spec": {"renewTime": "1970-01-01T00:00:00.000000Z"}})
            if not elector.try_acquire_or_renew():
                raise Busy(f"another gpualign upgrade took the lock {namespace}/{name} first")
        else:
            renewed = parse_time(spec.get("renewTime"))
            ago = (dt.datetime.now(dt.UTC) - renewed).total_seconds() if renewed else float("nan")
            raise Busy(f"another gpualign upgrade is running ({holder or 'unknown holder'}, lease "
                       f"{namespace}/{name} renewed {ago:.0f}s ago): refusing to run two walks at once")
    elector.leader = True
    elector.start()  # keeps renewing while the walk runs
    try:
        yield
    finally:
        stop.set()
        elector.release()
