"""PDB-aware admission (pure): hypothesis invariants, the order --dry-run prints, and the demand count."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpualign.upgrade import states as S
from gpualign.upgrade import upgrade_policy as pol
from gpualign.upgrade.blockers import PDB_WORDS, BlockKind
from gpualign.upgrade.budget import Budget, demands
from gpualign.upgrade.planner import BEFORE_EVICTION, NodeView, admission_order, next_actions
from tests.support.builders import pod
from tests.support.walks import node_views_with, policies, unique

PDBS = ("ml/a", "ml/b", "web/c")
demand = st.lists(st.tuples(st.sampled_from(PDBS), st.integers(1, 3)), max_size=2,
                  unique_by=lambda t: t[0]).map(lambda items: tuple(sorted(items)))


@st.composite
def budget_of(draw, name: str, full: bool = False) -> Budget:
    """A PDB's status as the disruption controller writes it: desired healthy, expected pods, and disruptions
    allowed now (at most expected - desired; exactly that when full, i.e. every pod healthy)."""
    desired = draw(st.integers(0, 4))
    expected = desired + draw(st.integers(0, 3))
    allowed = expected - desired if full else draw(st.integers(0, expected - desired))
    return Budget(name, allowed, desired + allowed, desired, expected)


budgets = st.fixed_dictionaries({name: budget_of(name) for name in PDBS})
full_budgets = st.fixed_dictionaries({name: budget_of(name, full=True) for name in PDBS})
fleets = st.lists(node_views_with(demand), max_size=12).map(unique)


def started(actions):
    return {a.node for a in actions if a.kind == "start"}


@given(fleets, policies, budgets)
def test_pdb_aware_admission_never_exceeds_the_limits(views, policy, budget):
    actions = next_actions(views, policy, budget)
    begun = started(actions)
    holds_slot = {v.name for v in views if v.state in S.IN_PROGRESS
                  and (v.state != S.FAILED or policy.failed_nodes_hold_slots)}
    if begun:
        assert len(holds_slot) + len(begun) <= (policy.max_parallel_upgrades or len(views))
        unavailable = {v.name for v in views if v.unavailable}
        newly = begun - unavailable
        if newly:
            assert len(unavailable) + len(newly) <= policy.max_unavailable_nodes(len(views))


@given(fleets, policies, budgets)
def test_each_admitted_node_finds_a_disruption_nobody_in_the_walk_spoke_for(views, policy, budget):
    """What admission promises each PDB: a node starts only when, after the pods still to evict on nodes already in
    the walk and on nodes admitted before it, the PDB has at least one disruption free, so the node's own
    evictions can go one after another; and never a PDB that can never allow one."""
    views = [replace(v, pdb_demand=()) if v.restart_only else v for v in views]  # a restart in place evicts none
    by_name = {v.name: v for v in views}
    begun = sorted(started(next_actions(views, policy, budget)))
    for pdb, b in budget.items():
        left = b.allowed - sum(need for v in views if v.state in BEFORE_EVICTION
                               for p, need in v.pdb_demand if p == pdb)
        for name in begun:
            for p, need in by_name[name].pdb_demand:
                if p == pdb:
                    assert left >= 1 and not b.never_allows, (name, pdb, b, left)
                    left -= need


@given(fleets, policies, full_budgets)
def test_a_node_a_sequential_drain_could_empty_is_not_held_forever(views, policy, budget):
    """If every PDB guarding a node's pods could let them go one after another (it allows a disruption when its
    pods are all healthy), the replay of the walk admits that node at some round: PDBs never hold it forever.
    Only a PDB that never allows a disruption does."""
    rounds, held = admission_order(views, policy, budget)
    by_name = {v.name: v for v in views}
    for name, action in held.items():
        if action.hold is BlockKind.PDB:
            assert action.subject in dict(by_name[name].pdb_demand) and action.reason.startswith(PDB_WORDS)
            assert any(budget[p].never_allows for p, _ in by_name[name].pdb_demand), (name, action, rounds)


@given(fleets, policies, budgets)
def test_a_node_no_pdb_guards_is_never_held_back_by_one(views, policy, budget):
    for action in next_actions(views, policy, budget):
        if action.hold is BlockKind.PDB:
            view = next(v for v in views if v.name == action.node)
            assert view.pdb_demand, action


@given(fleets, policies, budgets)
def test_the_operator_order_ignores_budgets(views, policy, budget):
    operator = pol.UpgradePolicy(**{**policy.__dict__, "admission": pol.OPERATOR_ORDER})
    assert next_actions(views, operator, budget) == next_actions(views, operator)


def test_the_issue_story_saturated_pdb_holds_its_nodes_and_the_rest_start():
    trainer = (("ml/trainer-pdb", 1),)
    views = [NodeView("gpu-a1", S.REQUIRED, False, pdb_demand=trainer),
             NodeView("gpu-a2", S.REQUIRED, False, pdb_demand=trainer),
             *(NodeView(f"gpu-{x}", S.REQUIRED, False) for x in ("b1", "c1", "d1", "e1"))]
    policy = pol.UpgradePolicy(max_parallel_upgrades=2, max_unavailable="100%")
    saturated = {"ml/trainer-pdb": Budget("ml/trainer-pdb", 0, 2, 2, 2)}
    actions = {a.node: a for a in next_actions(views, policy, saturated)}
    assert started(actions.values()) == {"gpu-b1", "gpu-c1"}
    assert actions["gpu-a1"].reason == ("waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions "
                                        "(2 healthy, 2 required), and never will: it requires 2 of its 2 pods")
    operator = next_actions(views, pol.UpgradePolicy(max_parallel_upgrades=2, max_unavailable="100%",
                                             admission=pol.OPERATOR_ORDER), saturated)
    assert started(operator) == {"gpu-a1", "gpu-a2"}  # what the issue saw: both cordoned, nothing moves
    rounds, held = admission_order(views, policy, saturated)
    assert rounds == [["gpu-b1", "gpu-c1"], ["gpu-d1", "gpu-e1"]]
    assert set(held) == {"gpu-a1", "gpu-a2"}
    relaxed = {"ml/trainer-pdb": Budget("ml/trainer-pdb", 1, 2, 1)}
    rounds, held = admission_order(views, policy, relaxed)
    assert sum(r.count("gpu-a1") + r.count("gpu-a2") for r in rounds) == 2 and not held
    assert not any({"gpu-a1", "gpu-a2"} <= set(r) for r in rounds)  # one at a time, never both together


def test_several_replicas_per_node_under_max_unavailable_one_go_node_after_node():
    """The most common PDB: 8 replicas, maxUnavailable 1, two replicas on each of four nodes. No node's pods can
    all go at once, but each node's can go one after another, as kubectl drain moves them: one node at a time is
    admitted, never none."""
    infer = (("kx/infer-pdb", 2),)
    views = [NodeView(f"gpu-{i}", S.REQUIRED, False, pdb_demand=infer) for i in range(4)]
    policy = pol.UpgradePolicy(max_parallel_upgrades=3, max_unavailable="100%")
    full = {"kx/infer-pdb": Budget("kx/infer-pdb", 1, 8, 7, 8)}
    actions = {a.node: a for a in next_actions(views, policy, full)}
    assert started(actions.values()) == {"gpu-0"}
    assert actions["gpu-1"].reason == ("waiting before cordon: PDB kx/infer-pdb allows 1 disruption (8 healthy, "
                                       "7 required); nodes already in the walk have 2 of its pods still to evict; "
                                       "this node would need 2")
    rounds, held = admission_order(views, policy, full)
    assert rounds == [["gpu-0"], ["gpu-1"], ["gpu-2"], ["gpu-3"]] and not held
    # while gpu-0 still has a pod to evict, the PDB's one disruption is spoken for
    walking = [NodeView("gpu-0", S.POD_DELETION, True, initial_unschedulable="false",
                        pdb_demand=(("kx/infer-pdb", 1),)), *views[1:]]
    assert started(next_actions(walking, policy, {"kx/infer-pdb": Budget("kx/infer-pdb", 0, 7, 7, 8)})) == set()
    # its pods gone and their replacements healthy again: the next node goes
    done = [NodeView("gpu-0", S.POD_DELETION, True, initial_unschedulable="false"), *views[1:]]
    assert started(next_actions(done, policy, full)) == {"gpu-1"}


def test_evictions_ahead_in_the_walk_are_spoken_for():
    views = [NodeView("a", S.POD_DELETION, True, initial_unschedulable="false", pdb_demand=(("ml/p", 1),)),
             NodeView("b", S.REQUIRED, False, pdb_demand=(("ml/p", 1),))]
    actions = next_actions(views, pol.UpgradePolicy(max_parallel_upgrades=2, max_unavailable="100%"),
                   {"ml/p": Budget("ml/p", 1, 3, 2)})
    (hold,) = [a for a in actions if a.node == "b"]
    assert hold.kind == "hold" and "nodes already in the walk have 1 of its pods still to evict" in hold.reason


def test_demand_counts_only_the_pods_pod_deletion_evicts():
    pdb = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "t"}}},
           "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2}}
    t = {"app": "t"}
    pods = [pod("t1", node="n1", labels=t), pod("t2", node="n1", labels=t), pod("t3", node="n2", labels=t),
            pod("cpu", node="n3", labels=t, gpu=None), pod("done", node="n4", labels=t, phase="Succeeded"),
            pod("other", node="n5", labels={"app": "x"})]
    assert demands([pdb], pods) == {"n1": {"ml/p": 2}, "n2": {"ml/p": 1}}
    assert Budget.from_pdb(pdb).numbers() == "allows 0 disruptions (2 healthy, 2 required)"


def test_admission_is_part_of_the_policy_file():
    assert pol.UpgradePolicy().admission == "pdb-aware"
    assert pol.from_dict({"admission": "operator"}).admission == "operator"
    try:
        pol.from_dict({"admission": "random"})
    except Exception as err:  # noqa: BLE001
        assert "admission: expected pdb-aware or operator" in str(err)
    else:
        raise AssertionError("accepted a bad admission")


def test_a_walk_left_with_pdb_holds_waits_only_for_a_budget_on_its_way_back():
    from gpualign.model.facts import node_facts
    from gpualign.upgrade.planner import Action
    from gpualign.upgrade.run import _recovering
    from gpualign.upgrade.snapshot import NodeState, Snapshot

    view = NodeView("gpu-c1", S.REQUIRED, False, pdb_demand=(("ml/trainer-pdb", 1),))
    node = {"metadata": {"name": "gpu-c1", "labels": {}}}
    snap = Snapshot({"gpu-c1": NodeState(node, node_facts(node), None, None, None, view)}, [])
    hold = [Action("gpu-c1", "hold", f"{PDB_WORDS}: PDB ml/trainer-pdb allows 0 disruptions", BlockKind.PDB,
                   subject="ml/trainer-pdb")]
    # an eviction still counted (0 allowed of the 1 it allows with every pod healthy): coming back by itself
    snap.budgets = {"ml/trainer-pdb": Budget("ml/trainer-pdb", 0, 2, 1, 2)}
    assert _recovering(snap, hold)
    # minAvailable equal to its pods: it never comes back, the walk ends and names it
    snap.budgets = {"ml/trainer-pdb": Budget("ml/trainer-pdb", 0, 2, 2, 2)}
    assert not _recovering(snap, hold)
    # at full budget a hold is not a PDB waiting to recover (it is the walk's own spoken-for evictions)
    snap.budgets = {"ml/trainer-pdb": Budget("ml/trainer-pdb", 1, 2, 1, 2)}
    assert not _recovering(snap, hold)
