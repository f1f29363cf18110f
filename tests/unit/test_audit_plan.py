"""The audit (required vs ledger vs running pods) and the plan (what a change would need)."""

from __future__ import annotations

from gpualign.base import labels as L
from gpualign.ledger.sources import Ledger
from gpualign.loaders.branches import load_policy
from gpualign.model.audit import AuditInput, DriverPod, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.facts import node_facts
from gpualign.model.needed_images import Change, images_needed
from tests.support.facts import REPO, RULES, gpu


def pod(tag: str, state: str = "Running") -> DriverPod:
    return DriverPod("gpu-operator/p", f"{REPO}:{tag}", tag, state, state == "Running")


def test_only_the_node_with_the_new_kernel_is_missing():
    nodes = [gpu("a"), gpu("b"), gpu("new", kernel="5.15.0-125-generic")]
    ledger = Ledger(frozenset({"580-5.15.0-124-generic-ubuntu22.04"}), ("t",))
    result = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(default="580"), repository=REPO))
    assert [f.status for f in result.findings] == ["present", "present", "missing"]
    assert result.missing == (("580-5.15.0-125-generic-ubuntu22.04",
                               f"{REPO}:580-5.15.0-125-generic-ubuntu22.04", ("new",)),)
    assert result.summary()["missing"] == 1 and not result.clean


def test_branch_comes_from_the_driver_pod_then_the_loaded_driver():
    nodes = [gpu("a")]
    ledger = Ledger(frozenset({"595-5.15.0-124-generic-ubuntu22.04"}), ("t",))
    from_pod = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(), repository=REPO,
                                pods={"a": pod("595-5.15.0-124-generic-ubuntu22.04")}))
    assert from_pod.findings[0].branch == "595" and from_pod.clean
    loaded = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(), repository=REPO))
    assert loaded.findings[0].branch == "580" and loaded.findings[0].status == "missing"


def test_plan_keeps_the_branch_a_node_runs_as_check_infers_it():
    """No branch named (no flag, policy or operator object): plan takes each node's driver pod's branch, then its
    loaded driver's, as check does; it said "no driver branch" for a node whose driver is not loaded yet."""
    nodes = [gpu("a"), gpu("b", **{L.DRIVER_CURRENT_FULL: ""})]
    ledger = Ledger(frozenset(), ("t",))
    pods = {"a": pod("595-5.15.0-124-generic-ubuntu22.04"),
            "b": pod("595-5.15.0-124-generic-ubuntu22.04", "ImagePullBackOff")}
    planned = images_needed(nodes, Change(kernel="5.15.0-125-generic"), ledger, RULES, BranchPolicy(), pods=pods)
    assert [n.tag for n in planned.needed] == ["595-5.15.0-125-generic-ubuntu22.04"] and not planned.unknown
    assert planned.needed[0].nodes == ("a", "b")
    unread = images_needed(nodes, Change(kernel="5.15.0-125-generic"), ledger, RULES, BranchPolicy())
    assert [n.tag for n in unread.needed] == ["580-5.15.0-125-generic-ubuntu22.04"]  # a's loaded driver
    assert [n for n, _ in unread.unknown] == ["b"]


def test_pod_running_an_image_for_another_kernel_is_flagged():
    nodes = [gpu("a", kernel="5.15.0-125-generic")]
    ledger = Ledger(frozenset({"580-5.15.0-125-generic-ubuntu22.04"}), ("t",))
    result = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                              pods={"a": pod("580-5.15.0-124-generic-ubuntu22.04")}))
    f = result.findings[0]
    assert f.status == "present" and f.pod_matches_kernel is False
    assert "built for another kernel" in f.reason and not result.clean


def test_host_managed_nodes_are_not_missing():
    nodes = [gpu("host", **{L.DEPLOY_DRIVER: "false"}), gpu("nopod")]
    result = audit(AuditInput(nodes, Ledger(frozenset(), ()), RULES, BranchPolicy(default="580"), repository=REPO,
                              pods={}))
    assert [f.status for f in result.findings] == ["host-managed", "host-managed"]
    assert "580.95.05" in result.findings[0].reason and "rests with the team" in result.findings[0].reason
    assert result.clean


def test_unknown_node_is_reported_not_skipped():
    broken = node_facts({"metadata": {"name": "x", "labels": {L.GPU_PRESENT: "true"}}})
    result = audit(AuditInput([broken], Ledger(frozenset(), ()), RULES, BranchPolicy(default="580"), repository=REPO))
    assert result.findings[0].status == "unknown"
    assert "is Node Feature Discovery running?" in result.findings[0].reason
    assert not result.clean


def test_policy_file_maps_pools_to_branches(tmp_path):
    f = tmp_path / "policy.yaml"
    f.write_text("pools:\n- selector: pool=train\n  branch: '595'\n- nodeSelector: {pool: infer}\n  branch: 580\n")
    policy = load_policy(f)
    assert policy.branch_for({"pool": "train"}) == "595"
    assert policy.branch_for({"pool": "infer"}) == "580"
    assert policy.branch_for({}) is None


def test_plan_kernel_bump_lists_tags_to_build_with_build_args():
    nodes = [gpu("a", pool="train"), gpu("b", pool="train")]
    ledger = Ledger(frozenset({"580-5.15.0-124-generic-ubuntu22.04"}), ("t",))
    result = images_needed(nodes, Change(kernel="5.15.0-125-generic"), ledger, RULES, BranchPolicy())
    (needed,) = result.to_build
    assert needed.nodes == ("a", "b")
    assert needed.build_args() == {"action": "mirror", "DRIVER_BRANCH": "580", "KERNEL_VERSION": "5.15.0-125-generic",
                                   "OS_TAG": "ubuntu22.04", "tag": "580-5.15.0-125-generic-ubuntu22.04",
                                   "modules": "open"}  # branch 580, kernelModuleType auto: open
    nothing = images_needed(nodes, Change(branch="580"), ledger, RULES, BranchPolicy())
    assert nothing.to_build == ()


def test_plan_os_migration():
    result = images_needed([gpu("a", kernel="6.8.0-48-generic")], Change(os_id="ubuntu", os_version="24.04"),
                  Ledger(frozenset(), ()), RULES, BranchPolicy())
    assert [n.tag for n in result.to_build] == ["580-6.8.0-48-generic-ubuntu24.04"]


def test_operator_mismatch_running_and_latent_each_name_the_image_the_node_needs():
    """The operator's objects make a node wrong two ways: its running pod has another OS's image, or (latent) the
    pod is right but its DaemonSet now names another OS's image, which the next restart deploys. Both reasons name
    the image the node needs (a fresh-clone run's ClusterPolicy oracle once caught the latent one without it)."""
    right, other_os = "580-5.15.0-124-generic-ubuntu22.04", "580-5.15.0-124-generic-rhel9.4"
    nodes = [gpu("running"), gpu("latent"), gpu("fine")]
    ledger = Ledger(frozenset({right}), ("t",))
    ds = "nvidia-gpu-driver-ubuntu22.04-x"
    result = audit(AuditInput(nodes, ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                              pods={"running": pod(other_os), "latent": pod(right), "fine": pod(right)},
                              planned={"running": (ds, f"{REPO}:{other_os}"), "latent": (ds, f"{REPO}:{other_os}"),
                            "fine": (ds, f"{REPO}:{right}")}))
    by = {f.name: f for f in result.findings}
    assert [by[n].status for n in ("running", "latent", "fine")] == ["operator-mismatch", "operator-mismatch",
                                                                      "present"]
    assert by["running"].reason == (f"the operator runs {REPO}:{other_os} here, but this node (ubuntu22.04, kernel "
                                    f"5.15.0-124-generic) needs {REPO}:{right}")
    assert by["latent"].reason.startswith(f"its DaemonSet {ds} now names {REPO}:{other_os}, built for another OS or "
                                          "kernel: the next driver restart deploys that here, but this node "
                                          f"(ubuntu22.04, kernel 5.15.0-124-generic) needs {REPO}:{right}")
    assert by["latent"].operator_image == f"{REPO}:{right}"  # what runs now
    assert result.missing == () and not result.clean  # the needed image is present: nothing to build, still not ok


def test_a_kernel_change_a_node_could_never_take_is_not_planned():
    """The review's #12: one --kernel applied to every node, whatever it runs."""
    from gpualign.model.needed_images import kernel_change_misfit as misfit

    assert misfit("6.8.0-1015-aws", "5.15.0-126-generic", "ubuntu", "22.04") == (
        "kernel 5.15.0-126-generic is the generic flavour; this node runs 6.8.0-1015-aws (aws): plan each flavour's "
        "nodes with -l and their own kernel")
    assert misfit("5.15.0-124-generic", "5.15.0-126-generic", "ubuntu", "22.04") is None
    assert misfit("6.8.0-48-generic", "5.15.0-126-generic", "ubuntu", "24.04").startswith(
        "ubuntu 24.04 does not ship kernel series 5.15")
    assert misfit("6.8.0-48-generic", "6.8.0-50-generic", "ubuntu", "24.04") is None
    assert misfit("6.12.117+deb13-amd64", "6.12.12_bpo-amd64", "debian", "13") == (
        "kernel 6.12.12_bpo-amd64 is built for Debian 12; this node runs Debian 13")
    assert misfit("6.1.0-47-amd64", "6.12.117_deb13-amd64", "debian", "12") == (
        "kernel 6.12.117_deb13-amd64 is built for Debian 13; this node runs Debian 12")
    assert misfit("6.1.0-47-amd64", "6.12.117_deb12-amd64", "debian", "12") is None  # bookworm-security's 6.12
    assert misfit("6.1.0-47-amd64", "6.1.0-50-amd64", "debian", "12") is None
    # review 5's M5: a Debian cloud or rt node is not planned onto the generic kernel (nor the other way round)
    assert misfit("6.1.0-50-cloud-amd64", "6.1.0-57-amd64", "debian", "12") == (
        "kernel 6.1.0-57-amd64 is the generic-amd64 flavour; this node runs 6.1.0-50-cloud-amd64 (cloud-amd64): plan "
        "each flavour's nodes with -l and their own kernel")
    assert misfit("6.1.0-50-rt-amd64", "6.1.0-57-amd64", "debian", "12") is not None
    assert misfit("6.12.117_deb13-arm64", "6.12.118+deb13-arm64-16k", "debian", "13") is not None
    assert misfit("6.1.0-50-cloud-amd64", "6.1.0-57-cloud-amd64", "debian", "12") is None
    assert misfit("6.12.115_deb13-amd64", "6.12.115+deb13.1-amd64", "debian", "13") is None
    assert misfit("6.12.117+deb13-amd64", "6.1.0-50-amd64", "debian", "13").startswith(
        "debian 13 does not ship kernel series 6.1")
    assert misfit("5.14.0-427.el9.x86_64", "5.14.0-503.el9.x86_64", "rhel", "9.4") is None  # not checked here


def test_a_driver_pods_report_is_dataclasses_asdict_in_the_same_order():
    import dataclasses

    pod = DriverPod("gpu-operator/nvidia-driver-x", "reg/nvidia/driver:580-6.1.0-28-amd64-debian12",
                    "580-6.1.0-28-amd64-debian12", "CrashLoopBackOff", False, crash="NVRM: API mismatch")
    assert list(pod.as_dict().items()) == list(dataclasses.asdict(pod).items())
    node = gpu("n1", "6.1.0-28-amd64", os_id="debian", os_version="12")
    found = audit(AuditInput([node], Ledger(frozenset(), ("t",)), RULES, pods={"n1": pod})).findings[0]
    assert found.as_dict()["driver_pod"] == dataclasses.asdict(pod)
