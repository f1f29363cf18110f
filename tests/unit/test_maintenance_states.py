"""The states k8s-operator-libs writes in requestor mode (node-maintenance-required, post-maintenance-required), and
who cordoned a node as the libs record it: the initial-state annotation is set ("true") only when the node was
unschedulable before the walk (pkg/upgrade/common_manager.go); absent, the walk cordoned it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.model.facts import node_facts
from gpualign.upgrade import report
from gpualign.upgrade import states as S
from gpualign.upgrade.planner import NodeView, next_actions
from gpualign.upgrade.snapshot import NodeState
from gpualign.upgrade.upgrade_policy import UpgradePolicy

TAG = "550-6.12.118_deb13-amd64-debian13"


def state(name: str, upgrade_state: str, *, cordoned: bool, initial: str | None = None,
          present: bool = True) -> NodeState:
    annotations = {S.INITIAL_UNSCHEDULABLE: initial} if initial is not None else {}
    node = {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", S.STATE_LABEL: upgrade_state},
                         "annotations": annotations}, "spec": {"unschedulable": cordoned}}
    return NodeState(node, node_facts(node), None, None, TAG,
                     NodeView(name, upgrade_state, cordoned, initial_unschedulable=initial, target_tag=TAG,
                              image_present=present))


@pytest.mark.parametrize("upgrade_state", [S.NODE_MAINTENANCE, S.POST_MAINTENANCE])
def test_a_node_the_maintenance_operator_cordoned_is_the_upgrades(upgrade_state):
    ns = state("m1", upgrade_state, cordoned=True)
    st_ = report.node_status(ns, ledger_known=False)
    assert st_.cordoned == "upgrade" and st_.state == upgrade_state
    lines = report.why(ns, ledger_known=False)
    assert not any("someone else" in line for line in lines)
    assert "cordoned by the upgrade: it is uncordoned when the new driver is validated" in lines


def test_a_cordoned_node_whose_image_is_missing_is_not_told_it_will_not_be_cordoned():
    lines = report.why(state("m1", S.NODE_MAINTENANCE, cordoned=True, present=False), ledger_known=True)
    assert not any("will not be cordoned" in line for line in lines)
    assert any("cordoned already" in line for line in lines)


def test_the_maintenance_states_sort_in_the_walks_order():
    order = S.ORDER
    assert order.index(S.REQUIRED) < order.index(S.NODE_MAINTENANCE) < order.index(S.POST_MAINTENANCE) \
        < order.index(S.POD_RESTART) < order.index(S.DONE)
    assert S.MAINTENANCE <= S.IN_PROGRESS


@given(st.sampled_from(list(S.ALL) + [S.UNKNOWN]), st.booleans(), st.sampled_from([None, "true", "false"]))
def test_who_cordoned_follows_the_libs_record(upgrade_state, cordoned, initial):
    who = report.cordoned_by(state("n", upgrade_state, cordoned=cordoned, initial=initial))
    if not cordoned:
        assert who == "no"
    elif initial == "true" or upgrade_state not in S.IN_PROGRESS:
        assert who == "someone-else"
    else:
        assert who == "upgrade"


def test_the_walk_never_acts_on_a_node_held_by_the_maintenance_operator():
    views = [NodeView("m1", S.NODE_MAINTENANCE, True, target_tag=TAG),
             NodeView("m2", S.POST_MAINTENANCE, True, target_tag=TAG)]
    actions = next_actions(views, UpgradePolicy())
    assert not [a for a in actions if a.kind in ("start", "handle", "uncordon", "finish")], actions
