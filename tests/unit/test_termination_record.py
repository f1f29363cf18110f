"""A failure's record for Kubernetes: with $GPUALIGN_TERMINATION_LOG set (a build Job's pod sets it to its
termination-message file), the failure is one JSON line there, saying whether running the same again may pass."""

from __future__ import annotations

import json
import socket

from tests.support.cli import run_cli


def test_bad_input_is_recorded_as_not_retryable(tmp_path):
    log = tmp_path / "termination-log"
    res = run_cli("ensure", "not-a-tag", "--ledger", "registry://127.0.0.1:5000/nvidia/driver",
                  env={"GPUALIGN_TERMINATION_LOG": str(log)})
    assert res.code == 2 and res.err.startswith("gpualign: error:")
    record = json.loads(log.read_text())
    assert record["retryable"] is False and record["exit"] == 2 and record["word"] == "error"
    assert record["message"] in res.err


def test_a_registry_that_does_not_answer_is_recorded_as_retryable(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "termination-log"
    res = run_cli("ensure", "535-6.1.0-50-amd64-debian12", "--ledger", f"registry://127.0.0.1:{port}/nvidia/driver",
                  "--upstream", "none", env={"GPUALIGN_TERMINATION_LOG": str(log)})
    assert res.code == 2, res.err
    record = json.loads(log.read_text())
    assert record["retryable"] is True and record["error"] == "Unreachable"


def test_nothing_is_written_without_the_variable(tmp_path):
    res = run_cli("ensure", "not-a-tag", "--ledger", "registry://127.0.0.1:5000/nvidia/driver")
    assert res.code == 2 and not list(tmp_path.iterdir())
