"""The registry-held build lock (ensure/registry_lock.py): one build of a tag at a time across clusters that push to
one ledger, with only the registry between them."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from gpualign.base.errors import Refused, Unreachable
from gpualign.ensure import registry_lock as RL


@dataclass
class Ref:
    host: str = "registry.local"
    repo: str = "nvidia/driver"


@dataclass
class Registry:
    """The four calls the lock makes, over a dict: last write wins, as in a registry."""

    ref: Ref = field(default_factory=Ref)
    manifests: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    refuse_push: bool = False
    refuse_delete: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    def push_image(self, tag: str, env: dict[str, str], repo: str | None = None,
                   labels: dict[str, str] | None = None) -> None:
        if self.refuse_push:
            raise Unreachable("registry registry.local: manifest refused: HTTP 403")
        with self.lock:
            self.manifests[(repo or self.ref.repo, tag)] = {"config": {"Labels": dict(labels or {})}}

    def image_config(self, tag: str, repo: str | None = None) -> dict[str, Any] | None:
        with self.lock:
            return self.manifests.get((repo or self.ref.repo, tag))

    def digest(self, tag: str, repo: str | None = None) -> str | None:
        got = self.image_config(tag, repo)
        return None if got is None else "sha256:" + hashlib.sha256(json.dumps(got).encode()).hexdigest()

    def delete_manifest(self, digest: str, repo: str | None = None) -> None:
        if self.refuse_delete:
            raise Refused("registry registry.local does not allow deleting")
        with self.lock:
            for key in [k for k in self.manifests if k[0] == repo and self.digest(k[1], k[0]) == digest]:
                del self.manifests[key]


TAG = "535-6.1.0-50-amd64-debian12"


def test_a_hold_is_written_beside_the_ledger_and_gone_after():
    reg, said = Registry(), []
    with RL.hold(reg, TAG, said.append, settle=0):  # type: ignore[arg-type]
        held = RL.read(reg, TAG)  # type: ignore[arg-type]
        assert held is not None and held.expires > 0
        assert ("nvidia/driver-locks", TAG) in reg.manifests  # never among the ledger's own tags
    assert RL.read(reg, TAG) is None and said == []  # type: ignore[arg-type]


def test_a_live_hold_of_another_makes_it_wait_and_says_who_once():
    reg, said, now = Registry(), [], [1000.0]
    RL._write(reg, TAG, "east/builder-7/1/abc", 1000.0 + 30)  # type: ignore[arg-type]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s  # time passes while it waits: the other hold expires, never renewed

    with RL.hold(reg, TAG, said.append, settle=0, poll=5, clock=lambda: now[0], sleep=sleep):  # type: ignore[arg-type]
        assert RL.read(reg, TAG).holder != "east/builder-7/1/abc"  # type: ignore[arg-type, union-attr]
    assert len(said) == 1 and said[0].startswith("waiting: east/builder-7/1/abc builds it (registry lock "
                                                 f"registry.local/nvidia/driver-locks:{TAG}")
    assert sum(s for s in slept if s == 5) >= 30  # it waited out the hold


def test_two_racing_holders_never_hold_at_once():
    reg = Registry()
    inside, most, order = [0], [0], []
    guard = threading.Lock()

    def build(name: str) -> None:
        with RL.hold(reg, TAG, lambda _m: None, settle=0.05, poll=0.02):  # type: ignore[arg-type]
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            order.append(name)
            threading.Event().wait(0.1)
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=build, args=(f"b{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert most[0] == 1 and sorted(order) == ["b0", "b1", "b2", "b3"]


def test_a_registry_that_refuses_the_lock_does_not_stop_the_build():
    reg, said, ran = Registry(refuse_push=True), [], []
    with RL.hold(reg, TAG, said.append, settle=0):  # type: ignore[arg-type]
        ran.append(True)
    assert ran == [True] and said[0].startswith("no registry lock (registry.local/nvidia/driver-locks:")
    assert "building with no lock across clusters" in said[0]


def test_where_deletes_are_refused_the_hold_is_released_as_expired():
    reg = Registry(refuse_delete=True)
    with RL.hold(reg, TAG, lambda _m: None, settle=0):  # type: ignore[arg-type]
        pass
    held = RL.read(reg, TAG)  # type: ignore[arg-type]
    assert held is not None and held.expires == 0.0
