"""The pure planner's invariants (hypothesis) and the policy file's parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.upgrade import states as S
from gpualign.upgrade import upgrade_policy as pol
from gpualign.upgrade.planner import NodeView, next_actions
from tests.support.walks import node_views, policies, unique


@given(st.lists(node_views, max_size=12).map(unique), policies)
def test_admission_never_exceeds_the_limits(views, policy):
    actions = next_actions(views, policy)
    started = {a.node for a in actions if a.kind == "start"}
    holds_slot = {v.name for v in views if v.state in S.IN_PROGRESS
                  and (v.state != S.FAILED or policy.failed_nodes_hold_slots)}
    limit = policy.max_parallel_upgrades or len(views)
    if started:
        assert len(holds_slot) + len(started) <= limit
        unavailable_before = {v.name for v in views if v.unavailable}
        newly = {n for n in started if n not in unavailable_before}
        if newly:
            assert len(unavailable_before) + len(newly) <= policy.max_unavailable_nodes(len(views))


@given(st.lists(node_views, max_size=12).map(unique), policies)
def test_no_node_without_its_image_is_started_and_admin_cordons_are_kept(views, policy):
    by_name = {v.name: v for v in views}
    for action in next_actions(views, policy):
        view = by_name[action.node]
        if action.kind == "start":
            assert view.image_present and view.needs_upgrade and not view.skip
            assert not view.unmovable or view.restart_only  # a restart in place moves no pod
            assert view.maintenance is None  # never cordoned behind the maintenance operator
        if action.kind == "uncordon":  # the libs record a cordon made before the walk as "true", and only that
            assert view.initial_unschedulable != "true"


def test_image_missing_holds_with_the_tag():
    (action,) = next_actions([NodeView("n", S.REQUIRED, False, image_present=False, target_tag="595-x")],
                     pol.UpgradePolicy())
    assert (action.kind, action.reason) == ("hold", "image missing: 595-x")


def test_one_failure_halts_the_fleet_unless_failed_nodes_free_their_slot():
    views = [NodeView("a", S.FAILED, True), NodeView("b", S.REQUIRED, False)]
    assert [a.kind for a in next_actions(views, pol.UpgradePolicy())] == ["hold", "hold"]
    freed = pol.UpgradePolicy(failed_nodes_hold_slots=False, max_unavailable="100%")
    assert [a.kind for a in next_actions(views, freed)] == ["hold", "start"]


def test_policy_defaults_and_file(tmp_path: Path):
    p = pol.UpgradePolicy()
    assert (p.max_parallel_upgrades, p.max_unavailable_nodes(10), p.pod_deletion.timeout_seconds,
            p.drain.enable, p.wait_for_completion.timeout_seconds) == (1, 3, 300, False, 0)
    f = tmp_path / "policy.yaml"
    f.write_text("maxParallelUpgrades: 3\nmaxUnavailable: 2\ndrain:\n  enable: true\n  podSelector: app=x\n"
                 "waitForCompletion:\n  podSelector: job=train\n  timeoutSeconds: 60\n")
    loaded = pol.load(f)
    assert loaded.max_parallel_upgrades == 3 and loaded.max_unavailable_nodes(100) == 2
    assert loaded.drain.enable and loaded.drain.pod_selector == "app=x"
    assert loaded.wait_for_completion == pol.WaitForCompletion("job=train", 60)


@pytest.mark.parametrize("text,message", [
    ("maxParallelUpgrades: -1\n", "maxParallelUpgrades: expected an integer >= 0"),
    ("maxUnavailable: lots\n", "maxUnavailable: expected an integer or a percentage"),
    ("drain:\n  enabel: true\n", "drain: unknown field 'enabel'"),
    ("podDeletion:\n  timeoutSeconds: 0\n", "podDeletion.timeoutSeconds: expected an integer >= 1"),
    ("maxParallel: 2\n", "unknown field 'maxParallel'"),
])
def test_bad_policy_files_are_named(tmp_path: Path, text, message):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(BadInput, match=message):
        pol.load(f)
