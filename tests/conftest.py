"""Shared fixtures. The lab is started once per test session (in a private state dir) and torn down at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.loopback_http import serve  # noqa: F401 - a fixture: a loopback HTTP server shaped per test

ROOT = Path(__file__).resolve().parent.parent
# Labs in the tests have no real node unless a test asks (`lab up --real-node`): there is one per machine, and the
# tests that need it (tests/integration/test_real_node*.py) must find it free.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 120) -> CliResult:
    """Run the real `gpualign` entry point in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "gpualign", *args], capture_output=True, text=True,
                          env=full_env, input=input, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> type[CliResult]:
    return CliResult


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:6]


@dataclass
class Lab:
    """A running lab: its state dir, kubeconfig, registry address and an admin Kube client."""

    state_dir: Path
    kubeconfig: Path
    registry: str
    apiserver: str
    bin_dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {"GPUALIGN_LAB_DIR": str(self.state_dir), "KUBECONFIG": str(self.kubeconfig)}

    def cli(self, *args: str, timeout: float = 120, input: str | None = None) -> CliResult:
        return run_cli(*args, env=self.env, timeout=timeout, input=input)

    def kube(self):  # noqa: ANN201 - gpualign.kube.client.Kube, imported lazily
        from gpualign.kube.client import Kube

        return Kube(str(self.kubeconfig))

    def kubectl(self, *args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc


def start_lab(state_dir: Path, scenario: str = "default", *, real_node: bool = False) -> Lab:
    from gpualign.lab import cluster, versions

    res = run_cli("lab", "up", "--scenario", scenario, *(["--real-node"] if real_node else []),
                  env={"GPUALIGN_LAB_DIR": str(state_dir)}, timeout=300)
    if res.code != 0:
        raise RuntimeError(f"lab up failed ({res.code}):\n{res.err}")
    state = cluster.LabState.load(state_dir)
    assert state is not None
    return Lab(state_dir, state.kubeconfig, state.registry, state.apiserver, versions.default_bin_dir())


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    state_dir = tmp_path_factory.mktemp("lab") / "state"
    instance = start_lab(state_dir)
    try:
        yield instance
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})


# The modules that need the machine's one real node (the demo takes it as `make demo` does) run on one worker, one
# after another; every other module runs whole on one worker, so a module's own lab (a scenario, a clean fleet) is
# started once. `make test` runs `pytest -n N --dist loadfile`; this scheduler refines loadfile's files so.
REAL_NODE_MODULES = frozenset({"test_real_node.py", "test_real_node_crash.py", "test_dropin_on_real_node.py",
                               "test_unattended_build.py",
                               "test_demo.py"})


# The longest units of work first, as measured in a warm `make test` (the real node's modules ~11 min under load,
# the network faults ~9, the coexistence test's quiet period ~6, then the modules of a minute or more): xdist hands
# out whole units in the order they were collected, so a long one started last would run alone at the end while
# the other workers sit idle. Its own order (most tests first) put these, few tests of minutes each, last.
LONGEST_FIRST = ("real-node", "test_network_faults.py", "test_operator_coexistence.py", "test_ensure_build.py",
                 "test_operator_walk.py", "test_upgrade_reliability.py", "test_upgrade_races.py",
                 "test_secure_boot.py", "test_upgrade_pdb_admission.py", "test_image.py", "test_build_trigger.py",
                 "test_controller.py", "test_upgrade_killrun.py", "test_operator_debian.py", "test_seed_story.py",
                 "test_lab_faults.py", "test_recorder_oracle.py", "test_fleet_report.py")


def _unit_of_work(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return "real-node" if Path(module).name in REAL_NODE_MODULES else module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest units of work first (a stable sort: each module's tests keep their order and stay together)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(_unit_of_work(item.nodeid)).name, len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's hook for a scheduler: loadfile's, with the real node's modules as one unit of work, handed out in
    the collection's order (longest first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ModulesAndTheRealNode(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid)

    return ModulesAndTheRealNode(config, log)
