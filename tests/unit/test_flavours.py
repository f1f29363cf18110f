"""Open or proprietary kernel modules: what the GPU Operator's kernelModuleType asks a node's driver pod to load,
read from its objects, judged against what a present image holds (its label), decided for a missing one by what
Debian's archive carries, and handed to the build Job and to `ensure --from`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.controller.build_trigger.job import BuildSettings, build_job
from gpualign.ensure.inputs import flavours_from_report
from gpualign.ledger.sources import Ledger
from gpualign.loaders.rules import load_rules
from gpualign.model import flavours
from gpualign.model import operator_config as oc
from gpualign.model.audit import AuditInput, Status, audit
from gpualign.model.expect import from_operator
from gpualign.model.facts import from_labels
from gpualign.model.makers import Maker, sources_from, who_makes

RULES = load_rules(archive_reading=False)
TAG = "550-6.12.118_deb13-amd64-debian13"
IMAGE = f"reg/nvidia/driver:{TAG}"


def debian13(name: str = "d13") -> Any:
    return from_labels(name, {"nvidia.com/gpu.present": "true",
                              "feature.node.kubernetes.io/kernel-version.full": "6.12.118_deb13-amd64",
                              "feature.node.kubernetes.io/system-os_release.ID": "debian",
                              "feature.node.kubernetes.io/system-os_release.VERSION_ID": "13"}, {})


CRD_MODE = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": {"driver": {"useNvidiaDriverCRD": True, "usePrecompiled": True, "repository": "reg/nvidia",
                                "image": "driver", "version": "550"}}}


def nvidia_driver(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "debian"},
            "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": "reg/nvidia", "image": "driver",
                     "version": "550", **spec}}


@pytest.mark.parametrize(("module_type", "branch", "flavour", "words"), [
    ("open", "535", "open", "open (kernelModuleType: open)"),
    ("proprietary", "580", "proprietary", "proprietary (kernelModuleType: proprietary)"),
    ("auto", "550", "proprietary", "proprietary (kernelModuleType: auto, branch 550 < 560)"),
    ("auto", "560", "open", "open (kernelModuleType: auto, branch 560 >= 560)"),
    (None, "580", "open", "open (kernelModuleType: auto, branch 580 >= 560)"),
    ("auto", None, "proprietary", "proprietary (kernelModuleType: auto)"),
])
def test_what_a_pod_loads_is_decided_as_the_driver_container_decides(module_type, branch, flavour, words):
    assert flavours.resolve(module_type, branch) == flavour
    assert flavours.explain(module_type, branch) == words


@given(st.sampled_from(flavours.FLAVOURS), st.sampled_from((*flavours.MODULE_TYPES, None)),
       st.integers(min_value=400, max_value=700).map(str))
def test_an_image_is_wrong_exactly_when_it_holds_the_other_flavour(held, module_type, branch):
    why = flavours.mismatch(held, module_type, branch)
    assert (why is None) == (held == flavours.resolve(module_type, branch))
    assert flavours.mismatch(None, module_type, branch) is None  # an unlabelled image: nothing claimed


def test_the_operators_kernel_module_type_is_read_from_each_object():
    for spec, expected in (({}, "auto"), ({"kernelModuleType": "open"}, "open"),
                           ({"kernelModuleType": "proprietary"}, "proprietary")):
        config = oc.read([CRD_MODE], [nvidia_driver(**spec)])
        assert config is not None
        exp = from_operator(config)(debian13(), None)
        assert exp.module_type == expected and exp.problem is None
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
              "spec": {"driver": {"usePrecompiled": True, "repository": "reg/nvidia", "image": "driver",
                                  "version": "550", "kernelModuleType": "open"}}}
    config = oc.read([policy], [])
    assert config is not None and from_operator(config)(debian13(), None).module_type == "open"
    bad = oc.read([CRD_MODE], [nvidia_driver(kernelModuleType="closed")])
    assert bad is not None
    problem = from_operator(bad)(debian13(), None).problem or ""
    assert "spec.kernelModuleType 'closed' is not one of auto, open, proprietary" in problem


def test_a_present_image_of_the_other_flavour_is_wrong_and_says_what_to_do():
    config = oc.read([CRD_MODE], [nvidia_driver(kernelModuleType="open")])
    assert config is not None
    ledger = Ledger(frozenset({TAG}), ("registry://reg/nvidia/driver",))
    nodes = [debian13()]
    unread = audit(AuditInput(nodes, ledger, RULES, expect=from_operator(config)))
    assert unread.findings[0].status == Status.PRESENT and unread.findings[0].modules == "open"
    judged = audit(AuditInput(nodes, ledger, RULES, expect=from_operator(config), flavours={IMAGE: "proprietary"}))
    (f,) = judged.findings
    assert f.status == Status.WRONG_IMAGE
    assert "it holds proprietary kernel modules, and the GPU Operator's pod here loads open (kernelModuleType: " \
           "open)" in f.reason and "gpualign ensure --flavour open" in f.reason
    assert judged.wrong_images()[0]["modules"] == "open"
    right = audit(AuditInput(nodes, ledger, RULES, expect=from_operator(config), flavours={IMAGE: "open"}))
    assert right.findings[0].status == Status.PRESENT


BOOKWORM = sources_from({"nvidia-kernel-source": "535.309.01-0+deb12u1", "nvidia-open-kernel-source": "535.261.03-1"})


def test_open_modules_are_built_only_where_the_archive_has_them_at_the_user_spaces_version():
    table = RULES.debian.with_sources("debian12", BOOKWORM, "Debian's archive (2026-12-02)")
    bookworm = who_makes("debian12", "535", "6.1.0-50-amd64", "amd64", False, debian=table, flavour="open")
    assert bookworm.maker is Maker.NONE
    assert "open kernel modules of NVIDIA 535 are 535.261.03, its user space 535.309.01" in bookworm.why
    trixie = who_makes("debian13", "550", "6.12.118_deb13-amd64", "amd64", False, debian=RULES.debian,
                       flavour="open")
    assert trixie.maker is Maker.BUILD and "--flavour open" in trixie.why
    proprietary = who_makes("debian12", "535", "6.1.0-50-amd64", "amd64", False, debian=table)
    assert proprietary.maker is Maker.BUILD


def test_a_missing_image_carries_its_flavour_to_ensure_and_to_the_build_job():
    config = oc.read([CRD_MODE], [nvidia_driver(kernelModuleType="open")])
    assert config is not None
    result = audit(AuditInput([debian13()], Ledger(frozenset(), ("registry://reg/nvidia/driver",)), RULES,
                              expect=from_operator(config)))
    (f,) = result.findings
    assert f.status == Status.MISSING and f.action == "build" and f.as_dict()["modules"] == "open"
    report = result.as_dict()
    assert report["missing"][0]["modules"] == "open"
    assert flavours_from_report(report) == {TAG: "open"}
    settings = BuildSettings(image="reg/gpualign:1", ledger="registry://reg/nvidia/driver", namespace="b")
    args = build_job(TAG, 1, ["d13"], settings, "", flavour="open")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["ensure", TAG] and args[args.index("--flavour") + 1] == "open"
    plain = build_job(TAG, 1, ["d13"], settings, "")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--flavour" not in plain


def test_an_images_flavour_is_read_from_nvidia_ko_alone():
    """The licenses as NVIDIA's modules carry them: nvidia.ko says which driver it is; the proprietary build's
    nvidia-uvm is "Dual MIT/GPL" and its nvidia-drm "MIT", so they say nothing of the flavour."""
    from gpualign.judging import kmod
    from tests.support.kmods import fake_ko

    def licensed(name: str, license_: str) -> kmod.Module:
        return kmod.read(name, fake_ko({"license": license_, "name": name[:-3]}, {}, ()))

    assert licensed("nvidia.ko", "NVIDIA").flavour == "proprietary"
    assert licensed("nvidia.ko", "Dual MIT/GPL").flavour == "open"
    assert licensed("nvidia-uvm.ko", "Dual MIT/GPL").flavour is None
    assert licensed("nvidia-drm.ko", "MIT").flavour is None
    assert licensed("nvidia.ko", "GPL").flavour is None


def test_plan_builds_each_pools_flavour_and_refuses_open_where_the_archive_cannot():
    """plan decides as check does: a pool whose NVIDIADriver asks for open modules has its images planned open (and
    `none` where the release has no open modules at its user space's version); ensure --from the plan builds that."""
    from gpualign.model.needed_images import Change, images_needed
    from gpualign.usecases.plan_images import _branches

    trixie = oc.read([CRD_MODE], [nvidia_driver(kernelModuleType="open")])
    assert trixie is not None
    policy = _branches(list(trixie.sources))
    result = images_needed([debian13()], Change(kernel="6.12.119+deb13-amd64"), Ledger(frozenset(), ("f",)), RULES,
                           policy)
    (needed,) = result.to_build
    assert needed.modules == "open" and needed.action == "build" and "--flavour open" in needed.making.why
    report = result.as_dict()
    assert flavours_from_report(report) == {needed.tag: "open"}
    assert needed.build_args()["modules"] == "open"
    table = RULES.debian.with_sources("debian12", BOOKWORM, "Debian's archive (2026-12-02)")
    bookworm_rules = dataclasses.replace(RULES, debian=table)
    bookworm = from_labels("d12", {"nvidia.com/gpu.present": "true",
                                   "feature.node.kubernetes.io/kernel-version.full": "6.1.0-50-amd64",
                                   "feature.node.kubernetes.io/system-os_release.ID": "debian",
                                   "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12"}, {})
    open_535 = oc.read([CRD_MODE], [nvidia_driver(version="535", kernelModuleType="open")])
    assert open_535 is not None
    refused = images_needed([bookworm], Change(kernel="6.1.0-51-amd64"), Ledger(frozenset(), ("f",)), bookworm_rules,
                   _branches(list(open_535.sources)))
    assert refused.to_build[0].action == "none" and "535.261.03" in refused.to_build[0].making.why


def test_why_names_the_modules_the_nodes_daemonset_asks_for():
    from gpualign.model.facts import node_facts
    from gpualign.upgrade import report
    from gpualign.upgrade.planner import NodeView
    from gpualign.upgrade.snapshot import NodeState, Pool

    def state(env: list[dict[str, str]] | None) -> NodeState:
        node = {"metadata": {"name": "d13", "labels": {}}}
        pool = None if env is None else Pool({"metadata": {"name": "nvidia-gpu-driver-debian13", "namespace": "g"},
                                              "spec": {"template": {"spec": {"containers": [
                                                  {"name": "nvidia-driver-ctr", "image": IMAGE, "env": env}]}}}},
                                             None)
        return NodeState(node, node_facts(node), None, pool, TAG,
                         NodeView("d13", "(none)", False, needs_upgrade=False, target_tag=TAG))

    asked_open = report.why(state([{"name": "KERNEL_MODULE_TYPE", "value": "open"},
                                   {"name": "OPEN_KERNEL_MODULES_ENABLED", "value": "true"}]), ledger_known=False)
    assert "kernel modules: open (kernelModuleType: open), as its DaemonSet asks" in asked_open
    auto = report.why(state([{"name": "KERNEL_MODULE_TYPE", "value": "auto"}]), ledger_known=False)
    assert "kernel modules: proprietary (kernelModuleType: auto, branch 550 < 560), as its DaemonSet asks" in auto
    assert not any(line.startswith("kernel modules:") for line in report.why(state(None), ledger_known=False))


def test_without_operator_objects_the_flag_and_the_policy_file_say_which_modules(tmp_path):
    """A fleet read from a dump (or with flags) has no kernelModuleType to read: --kernel-module-type, or a pool's
    kernelModuleType in the branch-policy file, says it; check and plan decide from it as from the operator's."""
    import json

    from tests.support.cli import run_cli

    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64",
            "feature.node.kubernetes.io/kernel-version.full": kernel,
            "feature.node.kubernetes.io/system-os_release.ID": "debian",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": release, "pool": pool}}}
        for name, kernel, release, pool in (("d13", "6.12.118_deb13-amd64", "13", "hopper"),
                                            ("d12", "6.1.0-50-amd64", "12", "old"))]}))
    rules_copy = {"GPUALIGN_CACHE": str(tmp_path / "cache")}  # no archive reading: the rules' copy decides
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("535-6.1.0-1-amd64-debian12\n")  # some other tag: the nodes' images are missing
    opened = run_cli("check", "--nodes-file", str(nodes), "--ledger", str(ledger), "--driver-branch", "550", "-l",
                     "pool=hopper", "--kernel-module-type", "open", "-o", "json", env=rules_copy)
    (node,) = json.loads(opened.out)["nodes"]
    assert (node["modules"], node["module_type"], node["action"]) == ("open", "open", "build"), opened.err
    assert "--flavour open" in node["action_reason"]
    policy = tmp_path / "pools.yaml"
    policy.write_text('pools:\n  - selector: "pool=hopper"\n    branch: "550"\n    kernelModuleType: open\n'
                      '  - selector: ""\n    branch: "535"\n')
    both = json.loads(run_cli("check", "--nodes-file", str(nodes), "--ledger", str(ledger), "--branch-policy",
                              str(policy), "-o", "json", env=rules_copy).out)
    assert {n["name"]: n["modules"] for n in both["nodes"]} == {"d13": "open", "d12": "proprietary"}
    planned = run_cli("plan", "--nodes-file", str(nodes), "--ledger", str(ledger), "--driver-branch", "535", "-l",
                      "pool=old", "--kernel-module-type", "open", "--build-matrix", env=rules_copy)
    # bookworm: open 535.261.03 beside a 535.309.01 user space: no image can hold both, so the matrix holds no Job
    # that could only fail, and says so
    assert json.loads(planned.out)["include"] == [] and planned.code == 1
    assert "not in the matrix" in planned.err and "535.261.03" in planned.err
    bad = run_cli("check", "--nodes-file", str(nodes), "--ledger", str(ledger), "--kernel-module-type", "closed")
    assert bad.code == 2 and bad.err.strip() == ("gpualign: error: --kernel-module-type 'closed': expected one of "
                                                 "auto, open, proprietary"), bad.err
    policy.write_text('pools:\n  - selector: ""\n    branch: "550"\n    kernelModuleType: shut\n')
    refused = run_cli("check", "--nodes-file", str(nodes), "--ledger", str(ledger), "--branch-policy", str(policy))
    assert refused.code == 2 and "kernelModuleType must be one of auto, open, proprietary, not 'shut'" in refused.err


def test_the_controllers_judgement_reads_the_branch_from_the_images_own_tag():
    from gpualign.judging.judge import Judgement

    found = Judgement(flavours={IMAGE: "proprietary", "reg/nvidia/driver:580-6.12.118_deb13-amd64-debian13": "open"})
    assert found.wrong_for(IMAGE, "amd64", "auto") is None  # 550: auto is proprietary
    assert "loads open (kernelModuleType: open)" in (found.wrong_for(IMAGE, "amd64", "open") or "")
    assert found.wrong_for("reg/nvidia/driver:580-6.12.118_deb13-amd64-debian13", "amd64", "auto") is None
    assert "it holds open kernel modules, and the GPU Operator's pod here loads proprietary" in \
        (found.wrong_for("reg/nvidia/driver:580-6.12.118_deb13-amd64-debian13", "amd64", "proprietary") or "")
    assert found.wrong_for(IMAGE, "amd64", None) is None  # not compared
