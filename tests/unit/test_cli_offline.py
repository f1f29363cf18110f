"""CLI behaviour that needs no cluster: exit codes, one-line errors, and files left untouched on failure."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

DEPLOY = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a  # note\nspec:\n  template:\n    spec:\n" \
         "      containers:\n      - name: c\n        image: x\n        resources:\n          limits:\n" \
         "            nvidia.com/gpu: 1\n"


def test_inject_in_place_rewrites_atomically_and_is_idempotent(tmp_path: Path):
    f = tmp_path / "d.yaml"
    f.write_text(DEPLOY)
    assert run_cli("cuda", "inject", "--cuda", "12.4", "-f", str(f), "--in-place").code == 0
    once = f.read_text()
    assert "nvidia.com/cuda.driver" in once and "# note" in once
    assert run_cli("cuda", "inject", "--cuda", "12.4", "-f", str(f), "--in-place").code == 0
    assert f.read_text() == once
    assert [p.name for p in tmp_path.iterdir()] == ["d.yaml"]  # no temp file left behind


def test_a_bad_file_leaves_every_file_untouched(tmp_path: Path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(DEPLOY)
    bad.write_text("apiVersion: v1\nkind: Deployment\nspec: [\n")
    res = run_cli("cuda", "inject", "--cuda", "12.4", "-f", str(good), "-f", str(bad), "--in-place")
    assert res.code == 2
    assert res.err.strip().splitlines()[-1].startswith(f"gpualign: error: {bad}:4: invalid YAML"), res.err
    assert good.read_text() == DEPLOY


def test_unknown_cuda_version_exit_2():
    res = run_cli("cuda", "affinity", "--cuda", "12.7")
    assert res.code == 2
    assert res.err.strip().startswith("gpualign: error: unknown CUDA version '12.7'; known: 11.8")


def test_affinity_json_is_the_nodeaffinity_object():
    import json

    res = run_cli("cuda", "affinity", "--cuda", "12.8", "--labels", "legacy", "-o", "json")
    data = json.loads(res.out)
    assert list(data) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(data["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]) == 2


def test_check_with_a_missing_nodes_file_is_one_line(tmp_path: Path):
    ledger = tmp_path / "l.txt"
    ledger.write_text("580-5.15.0-124-generic-ubuntu22.04\n")
    res = run_cli("check", "--nodes-file", str(tmp_path / "none.json"), "--ledger", str(ledger))
    assert res.code == 2
    assert res.err.strip() == f"gpualign: error: nodes file {tmp_path / 'none.json'}: cannot read: " \
                              "No such file or directory"


def test_help_teaches_by_example():
    for cmd in (["check"], ["plan"], ["cuda", "inject"], ["lab", "up"]):
        res = run_cli(*cmd, "--help")
        assert res.code == 0 and "Usage" in res.out
    assert "Example" in run_cli("check", "--help").out


def test_kubectl_plugin_entry_point_exists():
    import shutil
    import sys

    assert shutil.which("kubectl-gpualign", path=str(Path(sys.executable).parent))


def test_a_lab_pull_back_off_it_does_not_know_is_said_before_anything_starts(tmp_path):
    res = run_cli("lab", "up", "--state-dir", str(tmp_path / "lab"),
                  env={"GPUALIGN_LAB_PULL_BACKOFF": "slow"})
    assert res.code == 2 and res.err == ("gpualign: error: GPUALIGN_LAB_PULL_BACKOFF='slow': the driver simulator's "
                                         "pull back-off is fast or kubelet\n"), res.err
    assert not (tmp_path / "lab").exists()
