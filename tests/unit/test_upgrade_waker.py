"""Which watched changes wake the walk early (the watches themselves run against the lab in the upgrade tests)."""

from __future__ import annotations

import time

from gpualign.upgrade.waker import MIN_GAP, Waker
from tests.support import builders


def node(name: str, **labels: str) -> dict:
    return builders.node(name, base=False, **labels)


def woke(w: Waker) -> bool:
    hit = w._poke.is_set()
    w._poke.clear()
    return hit


def test_a_label_change_on_a_walking_node_wakes_but_our_own_state_label_does_not():
    w = Waker(kube=None, selector=None)  # type: ignore[arg-type]
    w._node_event("ADDED", node("a", **{"nvidia.com/cuda.driver.major": "580"}))
    w._node_event("ADDED", node("b"))
    w.follow({"a": "validation-required"})
    woke(w)
    w._node_event("MODIFIED", node("a", **{"nvidia.com/cuda.driver.major": "580",
                                           "nvidia.com/gpu-driver-upgrade-state": "validation-required"}))
    assert not woke(w)  # only the upgrade state changed: that was us
    w._node_event("MODIFIED", node("a", **{"nvidia.com/cuda.driver.major": "595"}))
    assert woke(w)  # GFD relabelled after the driver load
    w._node_event("MODIFIED", node("b", x="1"))
    assert not woke(w)  # not in the walk


def test_driver_pods_wake_only_for_walking_nodes():
    w = Waker(kube=None, selector=None)  # type: ignore[arg-type]
    w.follow({"a": "pod-restart-required"})
    w._driver_event("ADDED", {"metadata": {"name": "d"}, "spec": {"nodeName": "b"}})
    assert not woke(w)
    w._driver_event("MODIFIED", {"metadata": {"name": "d"}, "spec": {"nodeName": "a"}})
    assert woke(w)


def test_node_pods_wake_on_departures_and_on_job_progress_only():
    w = Waker(kube=None, selector=None)  # type: ignore[arg-type]
    w._walking = {"a": "pod-deletion-required", "j": "wait-for-jobs-required"}
    w._pod_event("a", "MODIFIED", {})
    assert not woke(w)  # an evicted pod got its deletionTimestamp: not gone yet
    w._pod_event("a", "DELETED", {})
    assert woke(w)
    w._pod_event("j", "MODIFIED", {})
    assert woke(w)  # a job pod may have finished


def test_wait_returns_early_when_poked_but_never_before_the_min_gap():
    w = Waker(kube=None, selector=None)  # type: ignore[arg-type]
    w._last_pass = time.monotonic()
    w._poke.set()
    t0 = time.monotonic()
    w.wait(5.0)
    took = time.monotonic() - t0
    assert MIN_GAP * 0.9 <= took < 1.0
    t0 = time.monotonic()
    w.wait(0.3)  # nothing happens: the fallback ends the wait
    assert 0.25 <= time.monotonic() - t0 < 1.0
