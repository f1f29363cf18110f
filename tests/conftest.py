"""Shared fixtures. The lab is started once per test session (in a private state dir) and torn down at the end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.cli import CliResult, run_cli
from tests.support.cosign_keys import registry  # noqa: F401 - a fixture: a registry of its own (nvidia/driver)
from tests.support.lab import Lab, start_lab
from tests.support.loopback_http import serve  # noqa: F401 - a fixture: a loopback HTTP server shaped per test

# A property holds or not whatever the machine's load: no example is failed for its time (speed is measured by the
# benchmarks in bench/, never by a test), so a test run beside labs, compiles and VMs is not flaky.
settings.register_profile("gpualign", deadline=None)
settings.load_profile("gpualign")

# Labs in the tests have no real node unless a test asks (`lab up --real-node`): there is one per machine, and the
# tests that need it (tests/integration/test_real_node*.py) must find it free.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")


@pytest.fixture
def cli() -> type[CliResult]:
    return CliResult


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:6]


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
