"""PDB-aware admission on the default lab fleet (the issue's story): a saturated PDB (ml/trainer-pdb, minAvailable 2
of 2) guards the trainer's two nodes. With --max-parallel 2 the walk upgrades every other node and never cordons
those two; relaxed mid-walk, they are admitted one at a time and the PDB is never breached. A recorder watching
every node, PDB and pod change is the witness."""

from __future__ import annotations

import json

import pytest

from gpualign import labels as L
from gpualign.upgrade.planner import BEFORE_EVICTION
from tests.conftest import run_cli, start_lab
from tests.helpers import wait_for
from tests.recorder import STATE, Recorder
from tests.upgrade_helpers import POOLS, UpgradeProcess

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture
def plab(tmp_path):
    lab = start_lab(tmp_path / "state")
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    yield lab
    run_cli("lab", "down", env=lab.env)


def trainer_nodes(kube) -> set[str]:
    return wait_for(lambda: {p["spec"]["nodeName"] for p in kube.pods("ml", label_selector="app=trainer")
                             if p["spec"].get("nodeName")} if len(kube.pods("ml", label_selector="app=trainer")) == 2
                    else None, what="both trainer pods placed")


def ever_cordoned(recorder: Recorder, names: set[str]) -> list[str]:
    return sorted({c.name for c in recorder.of("node") if c.name in names and c.type != "DELETED"
                   and (c.obj.get("spec") or {}).get("unschedulable")})


def states_seen(recorder: Recorder, name: str) -> list[str]:
    seen: list[str] = []
    for c in recorder.of("node"):
        if c.name == name:
            state = ((c.obj.get("metadata") or {}).get("labels") or {}).get(STATE, "")
            if not seen or seen[-1] != state:
                seen.append(state)
    return seen


@pytest.mark.timeout(600)
def test_a_saturated_pdb_holds_its_nodes_uncordoned_and_the_rest_upgrade(plab):
    kube = plab.kube()
    held = trainer_nodes(kube)
    ledger = f"registry://{plab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    try:
        res = plab.cli("upgrade", "--to-branch", "595", "--ledger", ledger, "--yes", "--max-parallel", "2",
                       timeout=400)
    finally:
        recorder.stop()
    assert res.code == 1, res.out + res.err  # only PDB-held nodes remain: named, exit 1
    nodes = {n["metadata"]["name"]: n for n in kube.nodes(f"{L.GPU_PRESENT}=true")}
    states = {n: x["metadata"]["labels"].get(STATE) for n, x in nodes.items()}
    assert {n for n, s in states.items() if s == "upgrade-done"} == set(nodes) - held
    assert {states[n] for n in held} == {"upgrade-required"}
    assert ever_cordoned(recorder, held) == []  # never cordoned, not even for a moment
    for name in held:
        blocker = nodes[name]["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
        assert blocker == ("waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions (2 healthy, "
                           "2 required)")
    assert "2 node(s) held before cordon" in res.out and "relax PDB ml/trainer-pdb" in res.out
    assert recorder.pdb_breaches() == []
    status = json.loads(plab.cli("status", "--ledger", ledger, "--to-branch", "595", "-o", "json").out)
    assert {r["name"]: r["hold"] for r in status["nodes"] if r["name"] in held} == dict.fromkeys(held,
                                                                                               "before-cordon")
    table = plab.cli("status", "--ledger", ledger, "--to-branch", "595")
    assert "waiting before cordon: PDB ml/trainer-pdb" in table.out


@pytest.mark.timeout(600)
def test_relaxed_mid_walk_the_held_nodes_are_admitted_one_at_a_time(plab):
    kube = plab.kube()
    held = trainer_nodes(kube)
    ledger = f"registry://{plab.registry}/nvidia/driver"
    recorder = Recorder(kube).start()
    walk = UpgradeProcess.start(plab.env, "--to-branch", "595", "--ledger", ledger, "--max-parallel", "2",
                                "--timeout", "400")
    try:
        walk.wait_line("waiting before cordon: PDB ml/trainer-pdb", timeout=120)
        walk.wait_line("→ upgrade-done", timeout=120)  # the walk goes on around the held nodes
        kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
        assert walk.finish(timeout=400) == 0, walk.output
    finally:
        recorder.stop()
    nodes = kube.nodes(f"{L.GPU_PRESENT}=true")
    assert {n["metadata"]["labels"].get(STATE) for n in nodes} == {"upgrade-done"}
    assert recorder.pdb_breaches() == []
    # One at a time: the second trainer node is admitted only once the first has no eviction left ahead (its pod
    # gone and its replacement healthy again), never while both have evictions pending.
    current: dict[str, str] = {}
    for c in recorder.of("node"):
        if c.name in held:
            current[c.name] = ((c.obj.get("metadata") or {}).get("labels") or {}).get(STATE, "")
            evicting = [n for n, s in current.items() if s in BEFORE_EVICTION]
            assert len(evicting) <= 1, f"both trainer nodes with evictions ahead at once: {current}"
    for name in held:
        assert "cordon-required" in states_seen(recorder, name)
