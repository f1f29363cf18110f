"""Which pods an upgrade moves, and how a PDB refusal is worded."""

from __future__ import annotations

import functools

from gpualign.upgrade import pods as P
from tests.support import builders

pod = functools.partial(builders.pod, gpu=None)


def test_gpu_pods_include_runtime_class_and_dra_users():
    assert P.is_gpu_pod(pod("a", gpu="nvidia.com/gpu"))
    assert P.is_gpu_pod(pod("b", gpu="nvidia.com/mig-1g.10gb"))
    assert P.is_gpu_pod(pod("c", runtime="nvidia"))  # the operator misses these (#2570)
    assert P.is_gpu_pod(pod("d", claims=True))
    assert not P.is_gpu_pod(pod("e", gpu="cpu"))


def test_to_move_filters():
    pods = [pod("gpu", gpu="nvidia.com/gpu"), pod("web"), pod("skip", gpu="nvidia.com/gpu",
            labels={"nvidia.com/gpu-driver-upgrade-drain.skip": "true"}),
            pod("done", gpu="nvidia.com/gpu", phase="Succeeded"),
            pod("driver", labels={"app.kubernetes.io/component": "nvidia-driver"}), pod("ds", owner="DaemonSet")]
    assert [p["metadata"]["name"] for p in P.to_move(pods, drain=False)] == ["gpu"]
    assert [p["metadata"]["name"] for p in P.to_move(pods, drain=True)] == ["gpu", "web"]
    assert [p["metadata"]["name"] for p in P.to_move(pods, drain=True, selector="x=y")] == []


def test_refusal_names_the_pdb_and_its_numbers():
    victim = pod("trainer-0", labels={"app": "trainer"})
    pdb = {"metadata": {"name": "trainer-pdb", "namespace": "ml"},
           "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
           "status": {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0}}
    other = {"metadata": {"name": "x", "namespace": "other"}, "spec": {"selector": {}}, "status": {}}
    assert P.refusal(victim, [pdb, other], "Cannot evict pod") == (
        "eviction of ml/trainer-0 refused by PDB ml/trainer-pdb: 2 healthy, 2 required, 0 disruptions allowed")
    assert P.refusal(victim, [], "rate limited") == "eviction of ml/trainer-0 refused: rate limited"


def test_label_selector_expressions():
    sel = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]},
                                {"key": "tier", "operator": "DoesNotExist"}]}
    assert P.label_selector_matches(sel, {"app": "a"})
    assert not P.label_selector_matches(sel, {"app": "a", "tier": "x"})
    assert not P.label_selector_matches(sel, {"app": "c"})


def test_refusal_names_a_phantom_disruption_the_pdb_still_counts():
    victim = {"metadata": {"namespace": "ml", "name": "trainer-0", "labels": {"app": "trainer"}}}
    pdb = {"metadata": {"namespace": "ml", "name": "trainer-pdb"},
           "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
           "status": {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0,
                      "disruptedPods": {"trainer-1": "2026-11-29T12:52:01Z", "trainer-2": "2026-11-29T12:52:03Z"}}}
    message = P.refusal(victim, [pdb], "Cannot evict pod")
    assert message.startswith("eviction of ml/trainer-0 refused by PDB ml/trainer-pdb: 1 healthy, 1 required, "
                              "0 disruptions allowed; it still counts ml/trainer-1 and 1 more as disrupted since "
                              "2026-11-29T12:52:01Z")
    assert "forgotten after 2 minutes" in message
