"""A blocker's kind (upgrade/blockers.py): the bounded label of gpualign_upgrade_blocked_seconds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.upgrade.blockers import BlockKind, kind_of
from gpualign.upgrade.planner import PDB_HOLD


def test_each_sentence_the_walk_writes_has_its_kind_whatever_its_numbers():
    cases = {
        f"{PDB_HOLD}: PDB ml/trainer-pdb allows 0 disruptions (2 healthy, 2 required), and never will": BlockKind.PDB,
        f"{PDB_HOLD}: PDB ml/trainer-pdb allows 0 disruptions (1 healthy, 2 required)": BlockKind.PDB,
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


@given(st.text(max_size=200))
def test_any_sentence_has_one_of_the_few_kinds(text):
    assert kind_of(text) in set(BlockKind)


def test_status_json_says_no_state_as_null_and_cordoned_as_a_boolean():
    """The review's #17: "state": "(none)" and "cordoned": "no" in JSON."""
    from gpualign.upgrade.report import NodeStatus

    free = NodeStatus("n", "(none)", None, "no", None, None, None, None, None, None).as_dict()
    assert (free["state"], free["cordoned"], free["cordoned_by"]) == (None, False, None)
    walked = NodeStatus("n", "drain-required", 5.0, "upgrade", None, None, None, None, None, None).as_dict()
    assert (walked["state"], walked["cordoned"], walked["cordoned_by"]) == ("drain-required", True, "upgrade")
