"""The gate beside the GPU Operator's walk (pure): where it puts a node, what it writes, and who may join the walk."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.controller import gate
from gpualign.controller.gate import ARMED, GATED, GATED_SINCE, HELD_WARNED, RELEASED, Posture, decide, posture
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import PDB_WORDS, BlockKind
from gpualign.upgrade.gate_admission import LEFT_HOLDING, Walking, operator_policy, walk_hold
from gpualign.upgrade.upgrade_policy import Drain, UpgradePolicy
from tests.support.builders import pod

states = st.sampled_from([str(s) for s in S.ALL] + [""])
marks = st.dictionaries(st.sampled_from([GATED, ARMED, RELEASED, GATED_SINCE, HELD_WARNED]),
                        st.sampled_from(["x", "2026-01-01T00:00:00Z"]), max_size=5)
skip_labels = st.sampled_from([{}, {S.SKIP_LABEL: "true"}, {S.SKIP_LABEL: "false"}])


def applied(labels: dict, annotations: dict, patch: dict | None) -> tuple[dict, dict]:
    labels, annotations = dict(labels), dict(annotations)
    for part, into in (("labels", labels), ("annotations", annotations)):
        for k, v in ((patch or {}).get(part) or {}).items():
            if v is None:
                into.pop(k, None)
            else:
                into[k] = v
    return labels, annotations


@given(states, st.booleans(), st.one_of(st.none(), st.just("target image r/d:t missing")),
       st.one_of(st.none(), st.just(f"{PDB_WORDS}: PDB ml/p allows 0")), st.booleans())
def test_a_node_is_let_into_the_walk_only_when_asked_with_nothing_to_hold_it(state, operator_node, image, walk,
                                                                             released):
    where = posture(state, operator_node=operator_node, image=image, walk=walk, released=released)
    if image is not None:
        assert where is Posture.HELD  # an image that cannot be used holds at every step, released or not
    if where is Posture.RELEASED:
        assert operator_node and state == S.REQUIRED and image is None and (walk is None or released)
    if operator_node and state in (S.UNKNOWN, S.DONE) and image is None:
        assert where is Posture.ARMED  # fail closed: no upgrade asked, the label waits for one


@given(skip_labels, marks, st.sampled_from(list(Posture)), st.sampled_from(["", "why"]))
def test_the_gate_never_touches_a_skip_label_it_did_not_set_and_lands_where_it_says(labels, annotations, where, why):
    patch = decide(labels, annotations, where, why)
    after_labels, after_ann = applied(labels, annotations, patch)
    foreign = labels.get(S.SKIP_LABEL) == "true" and not gate.ours(annotations)
    if foreign:
        assert patch is None  # someone else's label: never removed, never claimed
        return
    if where is Posture.HELD:
        assert after_labels.get(S.SKIP_LABEL) == "true" and after_ann[GATED] == why and ARMED not in after_ann
    elif where is Posture.ARMED:
        assert after_labels.get(S.SKIP_LABEL) == "true" and ARMED in after_ann and GATED not in after_ann
    elif where is Posture.RELEASED:
        assert after_labels.get(S.SKIP_LABEL) != "true" and RELEASED in after_ann
        assert not gate.ours(after_ann)
    elif where is Posture.FREE:
        assert not any(m in after_ann for m in gate.MARKS)
    assert decide(after_labels, after_ann, where, why) is None or where is Posture.FREE and patch is None


def test_a_hold_keeps_its_start_and_warning_while_its_reason_stays():
    held = {S.SKIP_LABEL: "true"}
    ann = {GATED: "old reason", GATED_SINCE: "2026-01-01T00:00:00Z", HELD_WARNED: "true"}
    assert decide(held, ann, Posture.HELD, "old reason") is None
    patch = decide(held, ann, Posture.HELD, "new reason")
    assert patch is not None and patch["annotations"][GATED_SINCE] == "2026-01-01T00:00:00Z"
    assert patch["annotations"][HELD_WARNED] == "true" and patch["labels"] == {}
    armed = decide({}, {}, Posture.ARMED)
    assert armed is not None and armed["labels"] == {S.SKIP_LABEL: "true"} and armed["annotations"][ARMED]


def test_release_lets_go_of_every_mark_and_only_of_its_own_label():
    assert gate.release({S.SKIP_LABEL: "true"}, {}) is None
    assert gate.release({}, {RELEASED: "t"}) == {"labels": {}, "annotations": dict.fromkeys(gate.MARKS)}
    out = gate.release({S.SKIP_LABEL: "true"}, {ARMED: "t"})
    assert out is not None and out["labels"] == {S.SKIP_LABEL: None}


# -- who may join the operator's walk ---------------------------------------------------------------------------------
def pdb(name: str, app: str, allowed: int, healthy: int, desired: int, expected: int) -> dict:
    """A PodDisruptionBudget as the disruption controller leaves it (policy/v1)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minAvailable": desired, "selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired,
                       "expectedPods": expected, "observedGeneration": 1}}


STRICT = pdb("strict", "train", 0, 1, 1, 1)  # minAvailable equal to its pods: never allows one
LOOSE = pdb("loose", "serve", 1, 2, 1, 2)


def gpu_pod(name: str, node: str, app: str) -> dict:
    return pod(name, node=node, labels={"app": app}, owner="ReplicaSet")


def test_a_strict_pdb_holds_its_node_and_a_loose_one_lets_its_node_in():
    pods = [gpu_pod("t-0", "gpu-a", "train"), gpu_pod("s-0", "gpu-b", "serve"), gpu_pod("s-1", "gpu-c", "serve")]
    held = walk_hold("gpu-a", unschedulable=False, walking=[], pods=pods, pdbs=[STRICT, LOOSE],
                     policy=UpgradePolicy())
    assert held is not None and held.hold is BlockKind.PDB and held.subject == "ml/strict"
    assert "never will" in held.reason
    assert walk_hold("gpu-b", unschedulable=False, walking=[], pods=pods, pdbs=[STRICT, LOOSE],
                     policy=UpgradePolicy()) is None
    # gpu-b is in the walk with its serve pod still to evict: the loose PDB's one disruption is spoken for
    again = walk_hold("gpu-c", unschedulable=False, walking=[Walking("gpu-b")], pods=pods, pdbs=[STRICT, LOOSE],
                      policy=UpgradePolicy())
    assert again is not None and again.subject == "ml/loose" and "nodes already in the walk have 1" in again.reason


@given(st.integers(0, 3), st.integers(1, 3), st.integers(0, 3))
def test_a_node_is_let_in_only_when_each_pdb_has_a_disruption_nobody_in_the_walk_spoke_for(allowed, here, walking):
    """Over the budgets the disruption controller writes: admitted iff the PDB's free disruptions, less the pods
    still to evict on walking nodes, leave at least one."""
    expected = here + walking + 1
    desired = max(0, expected - allowed)
    budget = pdb("p", "w", allowed, expected, desired, expected)
    pods = [gpu_pod(f"h{i}", "gpu-a", "w") for i in range(here)] + \
        [gpu_pod(f"w{i}", "gpu-b", "w") for i in range(walking)] + [gpu_pod("elsewhere", "gpu-z", "w")]
    held = walk_hold("gpu-a", unschedulable=False, walking=[Walking("gpu-b")], pods=pods, pdbs=[budget],
                     policy=UpgradePolicy())
    assert (held is None) == (allowed - walking >= 1 and desired < expected)


def test_a_gpu_holder_the_operator_would_not_move_holds_the_node():
    on_runtime = pod("r-0", node="gpu-a", gpu=None, runtime="nvidia", owner="ReplicaSet")
    held = walk_hold("gpu-a", unschedulable=False, walking=[], pods=[on_runtime], pdbs=[], policy=UpgradePolicy())
    assert held is not None and held.reason.startswith(LEFT_HOLDING) and "ml/r-0" in held.reason
    assert "drain.enable: false" in held.reason
    drained = UpgradePolicy(drain=Drain(enable=True))
    assert walk_hold("gpu-a", unschedulable=False, walking=[], pods=[on_runtime], pdbs=[], policy=drained) is None
    daemon = pod("d-0", node="gpu-a", owner="DaemonSet")
    held = walk_hold("gpu-a", unschedulable=False, walking=[], pods=[daemon], pdbs=[], policy=drained)
    assert held is not None and "DaemonSet pod ml/d-0" in held.reason
    operand = pod("dcgm", node="gpu-a", namespace="gpu-operator", gpu=None, runtime="nvidia", owner="DaemonSet")
    assert walk_hold("gpu-a", unschedulable=False, walking=[], pods=[operand], pdbs=[], policy=UpgradePolicy(),
                     operator_namespace="gpu-operator") is None
    bare = pod("b-0", node="gpu-a")  # no controller: the operator's pod deletion refuses it without force
    held = walk_hold("gpu-a", unschedulable=False, walking=[], pods=[bare], pdbs=[], policy=UpgradePolicy())
    assert held is not None and held.hold is BlockKind.UNMOVABLE and "no controller" in held.reason
    forced = operator_policy({"autoUpgrade": True, "podDeletion": {"force": True}})
    assert walk_hold("gpu-a", unschedulable=False, walking=[], pods=[bare], pdbs=[], policy=forced) is None


def test_an_upgrade_policy_the_gate_cannot_read_counts_as_the_stricter_defaults():
    assert operator_policy({"podDeletion": {"force": "yes"}}) == UpgradePolicy()
    assert operator_policy({"maxParallelUpgrades": 3, "drain": {"enable": True}}).drain.enable


def test_the_admission_holds_until_the_pdbs_are_read_and_follows_their_watch():
    """Fail closed: before the PDBs' watch has listed them, no node is let in; after, each event is the budget it
    judges by, with no LIST of its own."""
    from gpualign.controller.walk_admission import WalkAdmission
    from gpualign.model.facts import node_facts
    from tests.support.builders import node

    a1 = node_facts(node("gpu-a", **{S.STATE_LABEL: S.REQUIRED}))
    trainer = gpu_pod("t-0", "gpu-a", "train")

    class Cluster:
        def pods(self, **_: object) -> list[dict]:
            return [trainer]

        def list_raw(self, path: str, **_: object) -> list[dict]:
            raise AssertionError(f"listed {path}: the watch's PDBs are the ones to judge by")

    admission = WalkAdmission(Cluster(), lambda: [a1], lambda _f: UpgradePolicy())  # type: ignore[arg-type]
    with admission.turn():
        unread = admission.hold(a1, None)
    assert unread is not None and "have not been read yet" in unread.reason
    admission.sync_pdbs([STRICT])
    with admission.turn():
        held = admission.hold(a1, None)
    assert held is not None and held.subject == "ml/strict"
    relaxed = pdb("strict", "train", 1, 1, 0, 1)
    admission.pdb_event("MODIFIED", relaxed)
    with admission.turn():
        assert admission.hold(a1, None) is None
    admission.pdb_event("DELETED", relaxed)
    assert admission.pdbs == {}
