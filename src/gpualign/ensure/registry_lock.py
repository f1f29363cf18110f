"""One build of a tag at a time across every machine and cluster that pushes to one ledger: a lock the registry
itself holds.

Several clusters (each with its controller's `--build`) may fill one registry. A Kubernetes Lease is per cluster, so
they would compile and push the same tag side by side. The lock is a tiny image in `<ledger repository>-locks`,
tagged as the driver tag, whose labels name the holder and when the hold expires. It is renewed while the build
runs and deleted when it ends (or, where the registry allows no deletes, pushed again as expired).

A registry has no compare-and-swap, so a hold is taken in two steps: write, wait `settle` seconds, read back. Two
writers racing both read the last write, and only its writer goes on; the other waits. A holder that dies leaves its
hold to expire (`ttl`), so clocks must agree within a fraction of it (NTP). The push credentials the build already
has are all it needs. A registry that refuses the lock (tag immutability, no push right to the `-locks`
repository) does not stop the build: it is said once, and the build goes on with the per-cluster Lease alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpualign.base.errors import GpualignError

if TYPE_CHECKING:
    from gpualign.ledger.registry import RegistryClient

HOLDER = "io.gpualign.lock.holder"
EXPIRES = "io.gpualign.lock.expires"  # epoch seconds
TTL = 120.0  # a dead holder's lock lasts this long; a live one renews at a third of it
SETTLE = 0.5
POLL = 5.0


def repository(ledger_repo: str) -> str:
    """Where a ledger's build locks live: beside its images, never among its tags."""
    return f"{ledger_repo}-locks"


def identity() -> str:
    """This process, as a hold names it: the cluster (GPUALIGN_CLUSTER, set on the controller's build Jobs), the
    host (in a Job: its pod's name) and a nonce, so two holds never read alike."""
    cluster = os.environ.get("GPUALIGN_CLUSTER", "")
    return f"{cluster + '/' if cluster else ''}{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Hold:
    holder: str
    expires: float


def read(client: RegistryClient, tag: str) -> Hold | None:
    """The hold on a tag as the registry has it, or None (never held, released, or not a lock)."""
    config = client.image_config(tag, repository(client.ref.repo))
    labels = ((config or {}).get("config") or {}).get("Labels") or {}
    try:
        return Hold(str(labels[HOLDER]), float(labels[EXPIRES])) if HOLDER in labels else None
    except (KeyError, ValueError):
        return None


def _write(client: RegistryClient, tag: str, holder: str, expires: float) -> None:
    client.push_image(tag, {}, repository(client.ref.repo), labels={HOLDER: holder, EXPIRES: f"{expires:.0f}"})


def _release(client: RegistryClient, tag: str, me: str) -> None:
    repo = repository(client.ref.repo)
    held = read(client, tag)
    if held is None or held.holder != me:
        return  # expired and taken over meanwhile: the lock is someone else's now
    digest = client.digest(tag, repo)
    try:
        if digest is not None:
            client.delete_manifest(digest, repo)
            return
    except GpualignError:
        pass
    _write(client, tag, me, 0.0)  # deletes refused: an expired hold frees it as well


@contextlib.contextmanager
def hold(client: RegistryClient, tag: str, say: Callable[[str], None], *, ttl: float = TTL,
         settle: float = SETTLE, poll: float = POLL, clock: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Hold the registry's lock on `tag` for the body: wait while another live holder has it (saying who, once),
    renew it while the body runs, and release it after."""
    me = identity()
    where = f"{client.ref.host}/{repository(client.ref.repo)}:{tag}"
    told = False
    try:
        while True:
            held = read(client, tag)
            if held is not None and held.holder != me and held.expires > clock():
                if not told:
                    say(f"waiting: {held.holder} builds it (registry lock {where}, until "
                        f"{time.strftime('%H:%M:%S', time.gmtime(held.expires))} UTC unless renewed)")
                    told = True
                sleep(poll)
                continue
            _write(client, tag, me, clock() + ttl)
            sleep(settle)
            held = read(client, tag)
            if held is not None and held.holder == me:
                break
    except GpualignError as err:
        say(f"no registry lock ({where}: {err.message}): building with no lock across clusters")
        yield
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(GpualignError):
                _write(client, tag, me, clock() + ttl)

    renewer = threading.Thread(target=renew, name=f"lock-{tag}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(timeout=5)
        with contextlib.suppress(GpualignError):
            _release(client, tag, me)
