"""The install path README gives works: the wheel and sdist build (`python -m build`), the wheel installs into a
fresh venv, and the installed `gpualign` and `kubectl-gpualign` run with their rules data, away from the source tree.

Tests talk to 127.0.0.1 only, so the fresh venv does not download the dependencies: it reaches the project venv's
installed ones through a .pth file. What is under test is the wheel itself: its modules, its package data (the rules,
the lab's go.mod files), its entry points and its metadata.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.cli import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir",
                           str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "SetuptoolsDeprecationWarning" not in proc.stderr + proc.stdout  # an SPDX license, no deprecated tables
    return out


def test_the_wheel_carries_code_data_license_and_entry_points(built):
    (wheel,) = built.glob("gpualign-*.whl")
    (sdist,) = built.glob("gpualign-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpualign/rules/driver_images.yaml" in names and "gpualign/rules/cuda.yaml" in names
    assert any(n.endswith("gpualign/lab/go/gpu-operator/go.mod") for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert "License-Expression: Apache-2.0" in meta and requires
    assert not any("pydantic" in r for r in requires)  # start-up: typer 0.28, not 0.29 (see docs/contributing.md)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpualign = gpualign.cli.app:main" in entry and "kubectl-gpualign = gpualign.cli.app:main" in entry
    assert sdist.stat().st_size > 0


def test_the_installed_wheel_runs_offline_away_from_the_source(built, tmp_path):
    (wheel,) = built.glob("gpualign-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # dependencies, not gpualign
    install = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    where = subprocess.run([str(py), "-c", "import gpualign; print(gpualign.__file__)"], cwd=run_dir,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), where  # the installed copy, not the source tree
    version = subprocess.run([str(env_dir / "bin" / "gpualign"), "--version"], cwd=run_dir, capture_output=True,
                             text=True)
    assert version.returncode == 0 and "rules: driver images named as GPU Operator v" in version.stdout
    nodes = run_dir / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "g1", "labels": {
        "nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/kernel-version.full": "5.15.0-124-generic",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}}]}))
    (run_dir / "ledger.txt").write_text("580-5.15.0-124-generic-ubuntu22.04\n")
    for exe in ("gpualign", "kubectl-gpualign"):
        res = subprocess.run([str(env_dir / "bin" / exe), "check", "--nodes-file", "nodes.json", "--ledger",
                              "ledger.txt", "--driver-branch", "580", "-o", "json"], cwd=run_dir,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["summary"]["present"] == 1
