"""The GPU Operator's objects read as the operator reads them (pure), and the OS-tag rules by operator version."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.kube.inventory import read_operator_config
from gpualign.loaders.rules import load_rules
from gpualign.model import operator_config as oc
from gpualign.model.expect import from_operator
from gpualign.model.facts import node_facts
from gpualign.model.tags import for_operator, os_tag
from tests.support import builders


def cp(driver: dict[str, Any] | None, *, api: str = "nvidia.com/v1", version: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cluster-policy"}
    if version:
        meta["labels"] = {oc.VERSION_LABEL: version}
    return {"apiVersion": api, "kind": "ClusterPolicy", "metadata": meta,
            "spec": {} if driver is None else {"driver": driver}}


def nd(name: str, selector: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    body = {"driverType": "gpu", "usePrecompiled": True, "repository": "reg/nvidia", "image": "driver",
            "version": "580", **spec}
    if selector is not None:
        body["nodeSelector"] = selector
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name}, "spec": body}


def node(name: str = "n1", **labels: str) -> Any:
    return node_facts(builders.node(name, **labels))


PRECOMPILED = {"usePrecompiled": True, "repository": "reg/nvidia", "image": "driver", "version": "580"}


def test_clusterpolicy_precompiled_names_repository_and_branch():
    config = oc.read([cp(PRECOMPILED, version="v25.10.1")], [])
    assert config is not None and not config.nvidiadriver_mode and config.version == "v25.10.1"
    exp = from_operator(config)(node(), None)
    assert (exp.origin, exp.repository, exp.branch, exp.precompiled, exp.one_os_tag) == \
        ("clusterpolicy/cluster-policy", "reg/nvidia/driver", "580", True, True)


def test_no_clusterpolicy_means_no_operator_to_follow():
    assert oc.read([], [nd("a", None)]) is None


@pytest.mark.parametrize(("driver", "expected"), [
    ({"usePrecompiled": True, "repository": "reg", "image": "driver"}, "spec.driver.version missing"),
    ({"usePrecompiled": True, "image": "driver", "version": "580"}, "spec.driver.repository missing"),
    ({"usePrecompiled": True}, "DRIVER_IMAGE environment"),
    ({"usePrecompiled": True, "repository": "r", "image": "d", "version": "sha256:abc"}, "refuses a digest"),
    (None, "has no spec.driver"),
])
def test_a_clusterpolicy_missing_driver_fields_is_a_reason_not_a_crash(driver, expected):
    config = oc.read([cp(driver)], [])
    assert config is not None
    exp = from_operator(config)(node(), None)
    assert exp.problem and expected in exp.problem


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("version", "banana", "nvidiadriver/infer: spec.version 'banana' is neither a driver branch nor a driver version"),
    ("repository", "not a repo//x", "nvidiadriver/infer: spec.repository 'not a repo//x' is not an image repository"),
    ("image", "Driver Image", "nvidiadriver/infer: spec.image 'Driver Image' is not an image name"),
])
def test_a_bad_value_in_one_nvidiadriver_makes_only_its_nodes_unknown_naming_object_and_field(field, value, expected):
    config = oc.read([cp({**PRECOMPILED, "useNvidiaDriverCRD": True})],
                     [nd("train", {"pool": "train"}), nd("infer", {"pool": "infer"}, **{field: value})],
                     [("a", {"nvidia.com/gpu.present": "true", "pool": "train"}),
                      ("b", {"nvidia.com/gpu.present": "true", "pool": "infer"})])
    assert config is not None
    resolve = from_operator(config)
    good, bad = resolve(node("a", pool="train"), None), resolve(node("b", pool="infer"), None)
    assert good.problem is None and good.repository == "reg/nvidia/driver"  # the healthy pool is still read
    assert bad.problem is not None and expected in bad.problem


def test_kbld_style_image_and_disabled_driver():
    kbld = oc.read([cp({"usePrecompiled": True, "image": "reg/nvidia/driver:580"})], [])
    assert kbld is not None
    exp = from_operator(kbld)(node(), None)
    assert (exp.repository, exp.branch) == ("reg/nvidia/driver", "580")
    off = oc.read([cp({"enabled": False})], [])
    assert off is not None
    assert "spec.driver.enabled: false" in (from_operator(off)(node(), None).host_managed or "")


def test_regular_driver_keeps_the_full_version():
    config = oc.read([cp({"repository": "nvcr.io/nvidia", "image": "driver", "version": "580.95.05"})], [])
    assert config is not None
    exp = from_operator(config)(node(), None)
    assert (exp.precompiled, exp.driver_version, exp.branch) == (False, "580.95.05", "580")


def test_an_unknown_api_version_is_named():
    config = oc.read([cp(PRECOMPILED, api="nvidia.com/v2")], [])
    assert config is not None
    problem = from_operator(config)(node(), None).problem or ""
    assert "nvidia.com/v2, which gpualign does not read (it reads nvidia.com/v1)" in problem


def test_nvidiadriver_pools_pick_nodes_and_overlaps_are_refused():
    policy = cp({**PRECOMPILED, "useNvidiaDriverCRD": True})
    gpu = {"nvidia.com/gpu.present": "true"}
    nodes = [("a1", {**gpu, "pool": "train"}), ("b1", {**gpu, "pool": "infer"}), ("x1", {**gpu, "pool": "none"})]
    config = oc.read([policy], [nd("train", {"pool": "train"}), nd("infer", {"pool": "infer"}, version="595")],
                     nodes)
    assert config is not None and config.nvidiadriver_mode and not config.warnings
    resolve = from_operator(config)
    assert resolve(node("a1", pool="train"), None).branch == "580"
    assert resolve(node("b1", pool="infer"), None).origin == "nvidiadriver/infer"
    assert "no NVIDIADriver selects this node" in (resolve(node("x1", pool="none"), None).problem or "")
    # it names what it checked, so a mislabelled node shows which label to set
    assert "(checked: nvidiadriver/infer selects pool=infer; nvidiadriver/train selects pool=train)" in \
        (resolve(node("x1", pool="none"), None).problem or "")
    clash = oc.read([policy], [nd("train", {"pool": "train"}), nd("all", None)], nodes)
    assert clash is not None
    assert clash.warnings == ("nvidiadriver/all and nvidiadriver/train both select a1: the operator refuses "
                              "overlapping NVIDIADrivers (ConflictingNodeSelector)",)
    assert "ConflictingNodeSelector" in (from_operator(clash)(node("a1", pool="train"), None).problem or "")
    vgpu = oc.read([policy], [nd("v", None, driverType="vgpu-host-manager")], nodes)
    assert vgpu is not None
    assert "driverType vgpu-host-manager" in (from_operator(vgpu)(node(), None).problem or "")


def test_daemonset_image_is_the_driver_container_of_the_selecting_daemonset():
    ds = {"metadata": {"namespace": "gpu-operator", "name": "d"}, "spec": {"template": {"spec": {
        "nodeSelector": {"feature.node.kubernetes.io/kernel-version.full": "5.15.0-124-generic"},
        "containers": [{"name": "sidecar", "image": "x"}, {"name": "nvidia-driver-ctr", "image": "reg/d:580-k"}]}}}}
    assert oc.daemonset_image(node().labels, [ds]) == ("gpu-operator/d", "reg/d:580-k")
    assert oc.daemonset_image({"other": "1"}, [ds]) is None


class FakeKube:
    """Answers GETs from a table of path -> (status, body)."""

    def __init__(self, table: dict[str, tuple[int, Any]]) -> None:
        self.table = table

    def request(self, method: str, path: str, **_: Any) -> Any:
        status, body = self.table.get(path, (404, {}))
        return SimpleNamespace(status_code=status, json=lambda: body)


def test_reading_the_crs_falls_back_with_a_reason():
    forbidden = FakeKube({"/apis/nvidia.com/v1/clusterpolicies": (403, {})})
    config, notes = read_operator_config(forbidden, ())
    assert config is None and "not allowed to read ClusterPolicy objects" in notes[0]
    other_version = FakeKube({"/apis/nvidia.com": (200, {"versions": [{"groupVersion": "nvidia.com/v2"}]})})
    config, notes = read_operator_config(other_version, ())
    assert config is None and "serves ClusterPolicy as nvidia.com/v2, not nvidia.com/v1" in notes[0]
    absent = FakeKube({})
    assert read_operator_config(absent, ()) == (None, ())


@pytest.mark.parametrize(("version", "rhel9", "rhel10", "rocky9", "ol9"), [
    ("v0.0.0-20250917190837-d73a0086a6ba", "rhel9.4", "rhel10.1", "rocky9.4", "ol9.4"),  # the lab's pin
    ("v25.10.1", "rhel9.4", "rhel10.1", "rocky9.4", "ol9.4"),
    ("v26.3.3", "rhel9.4", "rhel10", "rocky9", "ol9.4"),
    ("v0.0.0-20260710000000-892d53bac4f7", "rhel9", "rhel10", "rocky9", "ol9.4"),  # main between the commits
    ("v26.7.0", "rhel9", "rhel10", "rocky9", "ol9"),
    ("v27.1.0", "rhel9", "rhel10", "rocky9", "ol9"),
])
def test_os_tags_follow_the_operator_version(version, rhel9, rhel10, rocky9, ol9):
    rules, note = for_operator(load_rules(), version)
    assert note is None and rules.operator_version == version
    got = (os_tag("rhel", "9.4", rules), os_tag("rhel", "10.1", rules), os_tag("rocky", "9.4", rules),
           os_tag("ol", "9.4", rules))
    assert got == (rhel9, rhel10, rocky9, ol9)
    assert os_tag("ubuntu", "22.04", rules) == "ubuntu22.04"


def test_an_unplaceable_operator_version_keeps_the_newest_rules_and_says_so():
    rules, note = for_operator(load_rules(), "devel-ubi8")
    assert note and "devel-ubi8" in note and os_tag("rhel", "9.4", rules) == "rhel9"


@given(st.text(max_size=40))
def test_for_operator_is_total(version):
    rules, _ = for_operator(load_rules(), version)
    assert os_tag("rhel", "9.4", rules) in ("rhel9", "rhel9.4")


def test_a_crd_mode_cluster_policy_without_driver_image_fields_still_hands_the_driver_to_its_nvidiadrivers():
    """Review 5's M9: a ClusterPolicy written for the NVIDIADriver mode often names no repository, image or version
    (the NVIDIADrivers do); it made every node unknown, and the NVIDIADrivers were never read."""
    config = oc.read([cp({"useNvidiaDriverCRD": True})], [nd("pool", None)])
    assert config is not None and config.nvidiadriver_mode
    (source,) = config.sources
    assert source.origin == "nvidiadriver/pool" and source.problem is None and source.version == "580"
    expectation = from_operator(config)(node(), None)
    assert expectation.problem is None and expectation.branch == "580"


# GPU Operator v26 (read from its source, api/nvidia/v1alpha1/nvidiadriver_types.go and
# controllers/nodelabeling_controller.go at v26.7.0): the CRD defaults `default: false` into every NVIDIADriver,
# a `default: true` one has no nodeSelector and governs the GPU nodes no other selects, the operator labels each
# node with its owner (`nvidia.com/gpu-operator.driver.owner`), and each object has its own upgradePolicy.
CRD_MODE = {"enabled": True, "useNvidiaDriverCRD": True}


def v26(name: str, selector: dict[str, str] | None, *, default: bool = False, **spec: Any) -> dict[str, Any]:
    obj = nd(name, selector, **spec)
    obj["spec"]["default"] = default  # the CRD's default, written into every object
    return obj


def test_v26_the_default_nvidiadriver_takes_the_gpu_nodes_no_other_selects():
    config = oc.read([cp(CRD_MODE)], [v26("train", {"pool": "train"}, version="595"),
                                      v26("fallback", None, default=True, version="580")])
    assert config is not None
    assert config.source_for(node(pool="train").labels)[0].origin == "nvidiadriver/train"
    assert config.source_for(node(pool="infer").labels)[0].origin == "nvidiadriver/fallback"
    pci_only = node_facts(builders.node("d1", **{"nvidia.com/gpu.present": None,
                                                 "feature.node.kubernetes.io/pci-10de.present": "true"}))
    assert config.source_for(pci_only.labels)[0].origin == "nvidiadriver/fallback"  # a DRA-mode GPU node too
    cpu = node_facts(builders.node("c1", base=False))
    assert config.source_for(cpu.labels)[0] is None
    assert not config.warnings  # the default one overlaps nobody: it takes only what no other selects


def test_v26_the_owner_label_the_operator_writes_is_the_answer():
    config = oc.read([cp(CRD_MODE)], [v26("train", {"pool": "train"}), v26("fallback", None, default=True)])
    assert config is not None
    moved = node(pool="train", **{oc.OWNER_LABEL: "fallback"})  # the operator has not relabelled it yet
    assert config.source_for(moved.labels)[0].origin == "nvidiadriver/fallback"
    gone = node(pool="train", **{oc.OWNER_LABEL: "deleted-one"})  # an owner no longer there: selectors decide
    assert config.source_for(gone.labels)[0].origin == "nvidiadriver/train"


def test_v26_each_nvidiadriver_carries_its_own_upgrade_policy():
    config = oc.read([cp({**CRD_MODE, "upgradePolicy": {"autoUpgrade": False}})],
                     [v26("train", {"pool": "train"}, upgradePolicy={"autoUpgrade": False}),
                      v26("infer", {"pool": "infer"}, upgradePolicy={"maxParallelUpgrades": 3}),
                      v26("fallback", None, default=True)])
    assert config is not None and config.per_driver_upgrades
    walks = {s.name: config.operator_walks(s) for s in config.sources}
    assert walks == {"fallback": True, "infer": True, "train": False}  # absent: on, as the operator defaults it
    assert next(s for s in config.sources if s.name == "infer").upgrade_policy == \
        oc.UpgradePolicy(True, 3, "25%", raw={"maxParallelUpgrades": 3})
    infer = node(pool="infer")
    assert config.walk_policy_for(infer.labels) == {"maxParallelUpgrades": 3}  # the gate reads its drain settings


def test_before_v26_the_clusterpolicys_upgrade_policy_governs_every_nvidiadriver():
    config = oc.read([cp({**CRD_MODE, "upgradePolicy": {"autoUpgrade": True}})], [nd("train", {"pool": "train"})])
    assert config is not None and not config.per_driver_upgrades
    assert config.operator_walks(config.sources[0]) is True
