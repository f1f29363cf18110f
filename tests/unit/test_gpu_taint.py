"""DaemonSet pods holding a GPU, kept off with the walk's NoExecute taint (pure): toleration matching as the
scheduler and taint manager do it, the node's taints, and which pods hold a node before cordon."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.upgrade import gpu_taint
from gpualign.upgrade import pods as P
from gpualign.upgrade.upgrade_policy import UpgradePolicy
from tests.support.builders import pod

tolerations = st.lists(st.fixed_dictionaries({}, optional={
    "key": st.sampled_from(["", gpu_taint.KEY, "nvidia.com/gpu"]),
    "operator": st.sampled_from(["Exists", "Equal"]),
    "value": st.sampled_from(["", "x"]),
    "effect": st.sampled_from(["", "NoExecute", "NoSchedule"])}), max_size=3)


def matches(t: dict) -> bool:
    """corev1.Toleration.ToleratesTaint for the walk's taint (value: a tag), written out case by case."""
    if t.get("effect") not in (None, "", "NoExecute"):
        return False
    if not t.get("key"):
        return t.get("operator") == "Exists"
    return t.get("key") == gpu_taint.KEY and t.get("operator") == "Exists"


@given(tolerations)
def test_a_toleration_matches_the_walks_taint_as_kubernetes_matches_it(given_tolerations):
    assert gpu_taint.tolerates(given_tolerations) == any(matches(t) for t in given_tolerations)


def test_the_walks_taint_is_added_once_and_removed_alone():
    theirs = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    tainted = gpu_taint.with_taint(theirs, "595-5.15.0-124-generic-ubuntu22.04")
    assert tainted[0] == theirs[0] and gpu_taint.has_taint(tainted)
    assert gpu_taint.with_taint(tainted, "x") == tainted
    assert gpu_taint.without_taint(tainted) == theirs
    assert len(gpu_taint.taint("5" * 100)["value"]) <= 63


def test_daemonset_gpu_pods_are_never_evicted_and_hold_a_node_only_when_they_cannot_be_kept_off():
    monitor = pod("gpu-monitor-x", node="a", owner="DaemonSet")
    trainer = pod("trainer-0", node="a", owner="ReplicaSet")
    assert P.to_move([monitor, trainer], drain=False) == [trainer]
    assert P.daemonset_gpu_pods([monitor, trainer]) == [monitor]
    tolerating = [{"operator": "Exists"}]
    assert P.unmovable([monitor, trainer], UpgradePolicy(), tolerating) == []
    held = P.unmovable([monitor], UpgradePolicy(), [{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert len(held) == 1 and "does not tolerate" in held[0] and "ml/gpu-monitor-x" in held[0]
    stubborn = pod("gpu-monitor-y", node="a", owner="DaemonSet")
    stubborn["spec"]["tolerations"] = [{"operator": "Exists"}]
    held = P.unmovable([stubborn], UpgradePolicy(), tolerating)
    assert len(held) == 1 and "tolerates every taint" in held[0]


LABEL_VALUE = __import__("re").compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def archive_tags() -> list[str]:
    """A precompiled image tag for every kernel whose headers Debian's archive carries (tests/data/debian-kernels.tsv,
    recorded from the archive), in each branch's form: the tags a walk taints nodes and DRA devices for."""
    from pathlib import Path

    from gpualign.model.kernels import label_of

    rows = (Path(__file__).parents[1] / "data" / "debian-kernels.tsv").read_text().splitlines()
    kernels = {line.split("\t")[2].removeprefix("linux-headers-") for line in rows
               if line.startswith(("bookworm", "trixie")) and "\tlinux-headers-" in line}
    return sorted(f"{branch}-{label_of(k)}-debian{'13' if '+deb13' in k else '12'}"
                  for k in kernels for branch in ("535", "595"))


def test_every_archive_kernels_tag_is_a_taint_value_kubernetes_takes_and_names_the_tag():
    tags = archive_tags()
    assert len(tags) > 50
    for tag in tags:
        value = gpu_taint.taint_value(tag)
        assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (tag, value)
        if len(tag) <= 63 and LABEL_VALUE.fullmatch(tag):
            assert value == tag  # the value names the image as it is


@given(st.text(max_size=90))
def test_any_target_makes_a_taint_value_kubernetes_takes(target):
    value = gpu_taint.taint_value(target)
    assert 0 < len(value) <= 63 and LABEL_VALUE.fullmatch(value)
