"""A blocker's kind (upgrade/blockers.py): the bounded label of gpualign_upgrade_blocked_seconds."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given
from hypothesis import strategies as st

from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import PDB_WORDS, TOLD, BlockKind, kind_of
from gpualign.upgrade.planner import NodeView
from tests.support.walks import node_views_with, policies, unique


def test_a_blocker_written_by_a_gpualign_that_wrote_no_kind_has_its_kind_from_its_words():
    cases = {
        f"{PDB_WORDS}: PDB ml/trainer-pdb allows 0 disruptions (2 healthy, 2 required), and never will": BlockKind.PDB,
        f"{PDB_WORDS}: PDB ml/trainer-pdb allows 0 disruptions (1 healthy, 2 required)": BlockKind.PDB,
        "image missing: 595-5.15.0-124-generic-ubuntu22.04": BlockKind.IMAGE_MISSING,
        "image present but wrong: 595-x: its labels name kernel y": BlockKind.IMAGE_WRONG,
        "image not verified: 535-x: no headers": BlockKind.IMAGE_UNVERIFIED,
        "waiting for ml/job-1 (selected by waitForCompletion 'app=batch')": BlockKind.WAITING_FOR_JOBS,
        "eviction of driver pod gpu-operator/nvidia-driver-x refused: Cannot evict": BlockKind.EVICTION,
        "no driver DaemonSet selects this node": BlockKind.DRIVER_POD,
        "no new driver pod appeared": BlockKind.DRIVER_POD,
        "validating: driver pod not Ready": BlockKind.VALIDATION,
        "validation timed out after 600s: driver pod not Ready": BlockKind.VALIDATION,
        "drain timed out after 300s: 1 pod(s) left": BlockKind.TIMEOUT,
        "gated: image reg/driver:595-k missing": BlockKind.IMAGE_MISSING,
        "something new": BlockKind.OTHER,
    }
    assert {text: kind_of(text) for text in cases} == cases


class Recording:
    """The cluster as the executor writes to it: each patch kept, Events dropped."""

    def __init__(self) -> None:
        self.patches: list[dict] = []

    def patch(self, path: str, body: dict) -> dict:
        self.patches.append(body)
        return {}

    def event(self, *_: object, **__: object) -> None:
        pass


@given(st.text(max_size=200))
def test_any_sentence_has_one_of_the_few_kinds(text):
    assert kind_of(text) in set(BlockKind)


@given(st.text(max_size=80), st.sampled_from(list(BlockKind)))
def test_the_kind_the_walk_wrote_is_the_kind_whatever_the_sentence_says(text, kind):
    assert kind_of(text, str(kind)) is kind
    assert kind_of(text, "a-kind-of-a-later-gpualign") is kind_of(text)


def test_the_walk_writes_each_hold_it_tells_with_its_kind_and_never_reads_its_own_words():
    """The walk branches on the planner's kinds (no sentence parsed); the node's record carries the kind beside the
    sentence, and the controller's metric reads it from there."""
    from gpualign.controller.board import fleet_view
    from gpualign.model.facts import node_facts
    from gpualign.upgrade import states as S
    from gpualign.upgrade import upgrade_policy as pol
    from gpualign.upgrade.executor import Executor
    from gpualign.upgrade.planner import NodeView, next_actions
    from gpualign.upgrade.snapshot import NodeState

    node = {"metadata": {"name": "n1", "resourceVersion": "1", "labels": {S.STATE_LABEL: S.REQUIRED}}}
    # an unmovable pod whose reason reads like a PDB hold: the kind, not the words, decides
    view = NodeView("n1", S.REQUIRED, False, target_tag="595-k", unmovable=(f"{PDB_WORDS}: ml/x has no controller",))
    (action,) = next_actions([view], pol.UpgradePolicy())
    assert (action.kind, action.hold) == ("hold", BlockKind.UNMOVABLE)
    kube, said = Recording(), []
    ex = Executor(kube, pol.UpgradePolicy(), report=lambda _n, m: said.append(m))  # type: ignore[arg-type]
    ex.apply(action, NodeState(node, node_facts(node), None, None, "595-k", view))
    (written,) = kube.patches
    assert written["metadata"]["annotations"][S.BLOCKER_KIND] == "unmovable"
    assert said == [f"blocked: {action.reason}"]
    annotated = {**node, "metadata": {**node["metadata"], "annotations": written["metadata"]["annotations"]}}
    fleet = fleet_view([], {"n1": node_facts(annotated)}, leader=True)
    assert fleet["blocked_kinds"] == {"n1": BlockKind.UNMOVABLE}  # its words alone say "other"
    assert kind_of(action.reason) is BlockKind.OTHER


def test_status_json_says_no_state_as_null_and_cordoned_as_a_boolean():
    """The review's #17: "state": "(none)" and "cordoned": "no" in JSON."""
    from gpualign.upgrade.report import NodeStatus

    free = NodeStatus("n", "(none)", None, "no", None, None, None, None, None, None).as_dict()
    assert (free["state"], free["cordoned"], free["cordoned_by"]) == (None, False, None)
    walked = NodeStatus("n", "drain-required", 5.0, "upgrade", None, None, None, None, None, None).as_dict()
    assert (walked["state"], walked["cordoned"], walked["cordoned_by"]) == ("drain-required", True, "upgrade")


def _at_admission(view: NodeView) -> NodeView:
    """Half the views at the walk's door (required, not cordoned, not skipped), where the holds are made."""
    return replace(view, state=S.REQUIRED, needs_upgrade=True, unschedulable=False, skip=False, maintenance=None)


@given(st.lists(node_views_with(st.sampled_from([(), (("ml/trainer-pdb", 1),)])), min_size=1, max_size=6).map(
           lambda views: [_at_admission(v) if i % 2 == 0 else v for i, v in enumerate(views)]),
       policies, st.integers(0, 2), st.booleans())
def test_status_and_why_word_every_hold_the_walk_writes_by_its_kind(views, policy, allowed, kind_written):
    """Over the holds the planner makes and the executor writes on the node (and as an older gpualign wrote them,
    without the kind): status's blocker_kind is the hold's kind, the table says "held before cordon" for every hold
    before cordon but a PDB's (whose words say it), and why names a PDB hold's PDB once, without its lead words."""
    from gpualign.model.facts import node_facts
    from gpualign.upgrade import report
    from gpualign.upgrade.budget import Budget
    from gpualign.upgrade.executor import Executor
    from gpualign.upgrade.planner import next_actions
    from gpualign.upgrade.snapshot import NodeState

    budgets = {"ml/trainer-pdb": Budget("ml/trainer-pdb", allowed, 2 + allowed, 2, 2)}
    for action in next_actions(unique(views), policy, budgets):
        if action.hold not in TOLD:
            continue
        view = next(v for v in views if v.name == action.node)
        node = {"metadata": {"name": view.name, "resourceVersion": "1", "labels": {S.STATE_LABEL: view.state}},
                "spec": {"unschedulable": view.unschedulable}}
        kube = Recording()
        Executor(kube, policy, report=lambda _n, _m: None).apply(  # type: ignore[arg-type]
            action, NodeState(node, node_facts(node), None, None, view.target_tag, view))
        written = dict(kube.patches[-1]["metadata"]["annotations"])
        if not kind_written:
            written.pop(S.BLOCKER_KIND)  # as a gpualign before the kind wrote it
        annotated = {**node, "metadata": {**node["metadata"], "annotations": written}}
        ns = NodeState(annotated, node_facts(annotated), None, None, view.target_tag, view)
        status = report.node_status(ns, ledger_known=False)
        expected = action.hold if kind_written else kind_of(action.reason)
        assert status.blocker == action.reason and status.blocker_kind == expected
        lines = report.why(ns, ledger_known=False)
        event(f"hold: {action.hold}")
        if action.hold is BlockKind.PDB and status.hold == "before-cordon":
            (line,) = [line for line in lines if line.startswith("held before cordon")]
            assert "ml/trainer-pdb" in line and PDB_WORDS not in line
