"""What keeps the walk from draining a node it should not, and the views from saying "present" when it is not so:
kubectl drain's pod rules, the holds they and unverified images make, failing driver pods and unverified images in
check's audit, one kernel order for the first refused symbol, and a mistyped registry repository."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from gpualign.base.errors import BadInput
from gpualign.judging.verify import ModuleResult, Verification
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.ledger.sources import Ledger
from gpualign.model.audit import AuditInput, DriverPod, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.ledger import Refusal
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S
from gpualign.upgrade import upgrade_policy as pol
from gpualign.upgrade.planner import UNMOVABLE_HOLD, NodeView, image_hold, next_actions
from tests.fake_registry import FakeRegistry
from tests.support import builders
from tests.support.facts import REPO, RULES, gpu

TAG = "580-5.15.0-124-generic-ubuntu22.04"


pod = functools.partial(builders.pod, owner="ReplicaSet")


def test_a_bare_pod_is_refused_without_force_naming_it_as_kubectl_drain_does():
    bare = pod("gpujob", owner=None)
    why = P.drain_refusal(bare, force=False, delete_empty_dir=False, drain=False)
    assert why and why.startswith("ml/gpujob has no controller") and "podDeletion.force" in why
    assert P.drain_refusal(bare, force=True, delete_empty_dir=False, drain=False) is None
    assert P.drain_refusal(pod("managed"), force=False, delete_empty_dir=False, drain=False) is None
    # owned, but by nothing that is its controller: kubectl drain refuses it too
    loose = pod("loose")
    loose["metadata"]["ownerReferences"][0]["controller"] = False
    assert P.drain_refusal(loose, force=False, delete_empty_dir=False, drain=True)


def test_emptydir_data_is_refused_without_delete_emptydir_data():
    scratch = pod("scratch", empty_dir=True)
    why = P.drain_refusal(scratch, force=False, delete_empty_dir=False, drain=True)
    assert why and "emptyDir" in why and "drain.deleteEmptyDir" in why
    assert P.drain_refusal(scratch, force=False, delete_empty_dir=True, drain=True) is None


def test_unmovable_follows_the_policy_and_the_drain_fallback():
    pods = [pod("gpujob", owner=None), pod("ok")]
    default = pol.UpgradePolicy()
    assert [w.split(" ", 1)[0] for w in P.unmovable(pods, default)] == ["ml/gpujob"]
    forced = dataclasses.replace(default, pod_deletion=dataclasses.replace(default.pod_deletion, force=True))
    assert P.unmovable(pods, forced) == []
    # pod deletion would fail on it and fall back to a drain that may force it: the drain's rules decide
    drain_forced = dataclasses.replace(default, drain=dataclasses.replace(default.drain, enable=True, force=True))
    assert P.unmovable(pods, drain_forced) == []
    # a drain also moves non-GPU pods: a bare web pod blocks a drain, not a pod deletion
    web = pod("web", owner=None)
    web["spec"]["containers"][0]["resources"] = {}
    assert P.unmovable([web], default) == []
    draining = dataclasses.replace(default, drain=dataclasses.replace(default.drain, enable=True))
    assert P.unmovable([web], draining)


def test_a_node_with_an_unmovable_pod_is_held_before_cordon_and_its_slot_goes_to_the_next():
    views = [NodeView("a", S.REQUIRED, False, target_tag=TAG, unmovable=("ml/gpujob has no controller: …",)),
             NodeView("b", S.REQUIRED, False, target_tag=TAG)]
    actions = {a.node: a for a in next_actions(views, pol.UpgradePolicy(max_parallel_upgrades=1))}
    assert actions["a"].kind == "hold" and actions["a"].reason.startswith(f"{UNMOVABLE_HOLD}: ml/gpujob")
    assert actions["b"].kind == "start"


def test_an_unverified_image_holds_with_the_way_out():
    from gpualign.upgrade.blockers import BlockKind

    held, kind = image_hold(TAG, Refusal(TAG, "it holds no kernel modules under /opt/lib/modules", unverified=True))
    assert held.startswith(f"image not verified: {TAG}: it holds no kernel modules") and "--no-verify-modules" in held
    assert kind is BlockKind.IMAGE_UNVERIFIED
    assert image_hold(TAG, Refusal(TAG, "its label says 6.1.0-47")) == (
        f"image present but wrong: {TAG}: its label says 6.1.0-47", BlockKind.IMAGE_WRONG)
    (action,) = next_actions([NodeView("n", S.REQUIRED, False, image_present=False, target_tag=TAG,
                               image_problem=Refusal(TAG, "x", unverified=True))], pol.UpgradePolicy())
    assert action.kind == "hold" and action.reason.startswith("image not verified")
    assert action.hold is BlockKind.IMAGE_UNVERIFIED


def test_a_present_image_whose_driver_pod_crash_loops_is_not_clean():
    ledger = Ledger(frozenset({TAG}), ("t",))
    failing = DriverPod("gpu-operator/p", f"{REPO}:{TAG}", TAG, "CrashLoopBackOff", False, "insmod: ERROR: …")
    result = audit(AuditInput([gpu("a"), gpu("b")], ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                              pods={"a": failing,
                                    "b": DriverPod("gpu-operator/q", f"{REPO}:{TAG}", TAG, "Running", True)}))
    a, b = result.findings
    assert a.status == b.status == "present"
    assert a.driver_pod_failing and not b.driver_pod_failing
    assert "but driver pod gpu-operator/p is CrashLoopBackOff" in a.reason and "insmod: ERROR" in a.reason
    assert result.summary()["driver_pod_failing"] == 1 and not result.clean
    row = result.as_dict()["nodes"][1]
    assert row["action"] is None and row["driver_pod_failing"] is False  # a present image has nothing to do


def test_a_driver_pod_waiting_for_an_image_now_present_is_told_how_to_pull_it_now():
    ledger = Ledger(frozenset({TAG}), ("t",))
    waiting = DriverPod("gpu-operator/p", f"{REPO}:{TAG}", TAG, "ImagePullBackOff", False)
    other = DriverPod("gpu-operator/q", f"{REPO}:other", "other", "ImagePullBackOff", False)
    result = audit(AuditInput([gpu("a"), gpu("b")], ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                              pods={"a": waiting, "b": other}))
    a, b = result.findings
    assert a.status == "present" and a.driver_pod_failing
    assert "the image is there now" in a.reason and "kubectl delete pod -n gpu-operator p" in a.reason
    assert "the image is there now" not in b.reason  # it waits for another image than the node needs


def test_an_image_that_could_not_be_verified_says_so():
    ledger = Ledger(frozenset({TAG}), ("t",))
    image = f"{REPO}:{TAG}"
    result = audit(AuditInput([gpu("a")], ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                              unverified={image: "kernel 5.15.0-124-generic has no headers in Debian's archive"}))
    (f,) = result.findings
    assert f.status == "present" and f.verified is False
    assert "modules not verified: kernel 5.15.0-124-generic has no headers" in f.reason
    assert result.summary()["unverified"] == 1
    ok = audit(AuditInput([gpu("a")], ledger, RULES, BranchPolicy(default="580"), repository=REPO,
                          verified={image: 773})).findings
    assert ok[0].verified is True and "773 symbol CRCs" in ok[0].reason


def test_the_first_refused_symbol_is_the_kernels_modprobe_order_not_the_alphabet():
    drm = ModuleResult("nvidia-drm.ko", 10, ("a",), ("nvidia-drm: disagrees about version of symbol a",))
    core = ModuleResult("nvidia.ko", 10, ("b",), ("nvidia: version magic '6.1.0-50' should be '6.1.0-47 …'",
                                                  "nvidia: disagrees about version of symbol b"))
    v = Verification("6.1.0-47-amd64", "535", (drm, core))
    assert v.first_refusal() == "nvidia: disagrees about version of symbol b"


def test_a_registry_without_the_repository_is_named_not_read_as_empty():
    client = RegistryClient(RegistryRef("fake.io", "nope/driver", "https"),
                            transport=FakeRegistry([TAG], status_override=404).transport)
    with pytest.raises(BadInput, match=r"registry fake\.io has no repository nope/driver \(NAME_UNKNOWN\)"):
        client.tags(missing_ok=False)
    assert client.tags() == []  # a repository about to be filled (ensure, --ensure) reads as empty


def test_a_crash_looping_driver_backs_off_as_a_kubelet_does():
    from gpualign.lab.driver_sim import crash_backoff

    assert [crash_backoff(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [10, 20, 40, 80, 160, 300, 300]


def test_a_node_added_to_an_operator_scenario_joins_its_nvidiadriver_or_is_refused():
    from gpualign.cli.lab import _operator_pool
    from gpualign.lab import scenarios

    debian = list(scenarios.get("operator-debian").pools)
    pool, said = _operator_pool(debian, {}, None)
    assert pool.node_selector == {"pool": "debian"} and "labelled pool=debian to join NVIDIADriver debian" in said
    with pytest.raises(BadInput, match="--branch 580: the node joins NVIDIADriver debian, which deploys branch 535"):
        _operator_pool(debian, {}, "580")
    several = [*debian, scenarios.DriverPool("other", {"pool": "x"}, "580")]
    with pytest.raises(BadInput, match=r"would join no NVIDIADriver.*debian \(pool=debian\); other \(pool=x\)"):
        _operator_pool(several, {}, None)
    assert _operator_pool(several, {"pool": "x"}, None)[0].name == "other"


def test_an_image_whose_config_says_nothing_of_what_it_is_is_never_present_unverified(monkeypatch):
    """The review's P0 #9: the same layers with their labels stripped were "present, nothing to do" for ensure and
    `"wrong": null` for plan, while the walk held the node. A precompiled tag's image with no labels at all is
    unverified, with the reason, for every view that judges it; one whose labels agree with its tag is present."""
    from gpualign.judging.judge import NO_LABELS, judge

    tag, labelled = "535-6.1.0-50-amd64-debian12", "535-6.12.117_deb12-amd64-debian12"
    ubuntu = "580-5.15.0-124-generic-ubuntu22.04"  # its modules cannot be checked here: the walk does not either
    bare = {"architecture": "amd64", "os": "linux", "config": {"Env": ["DRIVER_VERSION=535.309.01"]}}
    configs = {tag: bare, ubuntu: bare,
               labelled: {"architecture": "amd64", "os": "linux",
                          "config": {"Labels": {"version": "535-6.12.117+deb12-amd64"}}}}  # either spelling

    class Registry:
        def image_config_and_platforms(self, t: str, arch: str = "amd64") -> tuple[dict, tuple[str, ...]]:
            return configs[t], ("amd64",)

        def image_config(self, t: str, arch: str = "amd64") -> dict:
            return configs[t]

        def close(self) -> None:
            pass

    monkeypatch.setattr("gpualign.judging.judge.connect", lambda *_a, **_k: Registry())
    needs = {f"r.local/d:{tag}": ("6.1.0-50-amd64",), f"r.local/d:{labelled}": ("6.12.117_deb12-amd64",),
             f"r.local/d:{ubuntu}": ("5.15.0-124-generic",)}
    found = judge(needs)
    assert found.unverified == {f"r.local/d:{tag}": NO_LABELS} and found.wrong == {}
    assert judge(needs, unlabelled=False).unverified == {}  # the walk: its module check, or the opt-out, decides


def test_the_lab_retries_a_failed_pull_as_a_kubelet_does_when_asked():
    from gpualign.lab.driver_sim import Simulator

    kubelet, fast = Simulator(None, "r", pull_backoff="kubelet"), Simulator(None, "r")  # type: ignore[arg-type]
    assert [kubelet.wait_after(("backoff", 0.0, n)) for n in (1, 2, 3, 4, 5, 6, 7)] == [10, 20, 40, 80, 160, 300, 300]
    assert [fast.wait_after(("backoff", 0.0, n)) for n in (1, 2, 7)] == [2, 2, 2]
    assert kubelet.wait_after(("crash", 0.0, 2)) == fast.wait_after(("crash", 0.0, 2)) == 20  # restarts: the same
