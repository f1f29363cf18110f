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
