"""Fuzzing the CLI's inputs (hypothesis): whatever a file holds, gpualign ends with exit 0, 1 or 2 and, on 2, one
clear line on stderr — never a traceback, never an internal error. Runs the real entry point in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpualign.cli.app import main

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=20))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c,
                                                                                          max_size=4), max_leaves=20)
label_keys = st.sampled_from(["nvidia.com/gpu.present", "feature.node.kubernetes.io/kernel-version.full",
                              "feature.node.kubernetes.io/system-os_release.ID",
                              "feature.node.kubernetes.io/system-os_release.VERSION_ID",
                              "nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver-version.full", "x"])
nodes = st.lists(st.fixed_dictionaries({"kind": st.just("Node"), "metadata": st.fixed_dictionaries({
    "name": st.text(min_size=1, max_size=8), "labels": st.dictionaries(label_keys, st.text(max_size=24))})}),
    max_size=5)
file_bytes = st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                       json_values.map(lambda v: json.dumps(v).encode()))


def run(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    err = capsys.readouterr().err
    return int(exit_info.value.code or 0), err


def assert_clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), err
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 2:  # one error line, after any warnings
        lines = [line for line in err.strip().splitlines() if not line.startswith("gpualign: warning: ")]
        assert len(lines) == 1 and lines[0].startswith("gpualign: error: "), err


@FUZZ
@given(ledger=file_bytes)
def test_any_ledger_file(tmp_path: Path, capsys, ledger: bytes):
    (tmp_path / "nodes.json").write_text(json.dumps({"items": []}))
    (tmp_path / "ledger.txt").write_bytes(ledger)
    assert_clean(*run(capsys, "check", "--nodes-file", str(tmp_path / "nodes.json"), "--ledger",
                      str(tmp_path / "ledger.txt"), "--driver-branch", "580"))


@FUZZ
@given(dump=st.one_of(file_bytes, nodes.map(lambda n: json.dumps({"kind": "List", "items": n}).encode())))
def test_any_nodes_dump(tmp_path: Path, capsys, dump: bytes):
    (tmp_path / "nodes.json").write_bytes(dump)
    (tmp_path / "ledger.txt").write_text("580-5.15.0-124-generic-ubuntu22.04\n")
    assert_clean(*run(capsys, "check", "--nodes-file", str(tmp_path / "nodes.json"), "--ledger",
                      str(tmp_path / "ledger.txt"), "-o", "json"))


@FUZZ
@given(policy=st.one_of(file_bytes, json_values.map(lambda v: json.dumps({"pools": v}).encode())))
def test_any_branch_policy_file(tmp_path: Path, capsys, policy: bytes):
    (tmp_path / "nodes.json").write_text(json.dumps({"items": []}))
    (tmp_path / "ledger.txt").write_text("x\n")
    (tmp_path / "policy.yaml").write_bytes(policy)
    assert_clean(*run(capsys, "check", "--nodes-file", str(tmp_path / "nodes.json"), "--ledger",
                      str(tmp_path / "ledger.txt"), "--branch-policy", str(tmp_path / "policy.yaml")))


@FUZZ
@given(policy=st.one_of(file_bytes, json_values.map(lambda v: json.dumps(v).encode())))
def test_any_upgrade_policy_file(tmp_path: Path, capsys, monkeypatch, policy: bytes):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    (tmp_path / "ledger.txt").write_text("x\n")
    (tmp_path / "policy.yaml").write_bytes(policy)
    assert_clean(*run(capsys, "upgrade", "--upgrade-policy", str(tmp_path / "policy.yaml"), "--ledger",
                      str(tmp_path / "ledger.txt"), "--dry-run"))


@FUZZ
@given(manifest=st.one_of(file_bytes, json_values.map(lambda v: json.dumps(v).encode())))
def test_any_manifest_for_inject_leaves_the_file_untouched_on_error(tmp_path: Path, capsys, manifest: bytes):
    f = tmp_path / "m.yaml"
    f.write_bytes(manifest)
    code, err = run(capsys, "cuda", "inject", "--cuda", "12.4", "-f", str(f), "--in-place")
    assert_clean(code, err)
    if code != 0:
        assert f.read_bytes() == manifest
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]
