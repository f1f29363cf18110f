"""A read begun in the background says nothing until its result is asked for, then says what it would have said,
in order, in the caller's thread; its error is raised there, as read_nodes would have raised it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from gpualign.base.errors import BadInput
from gpualign.usecases.nodes import Reading, no_gpu_nodes


def dump(path: Path, gpu: bool) -> Path:
    labels = {"nvidia.com/gpu.present": "true"} if gpu else {}
    path.write_text(json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1",
                                                                                       "labels": labels}}]}))
    return path


def test_what_the_read_says_is_said_by_result_in_the_callers_thread(tmp_path: Path) -> None:
    said: list[tuple[str, str, str]] = []

    def record(kind: str):  # noqa: ANN202
        return lambda m: said.append((kind, m, threading.current_thread().name))

    reading = Reading(dump(tmp_path / "none.json", gpu=False), None, None, None, say=record("say"),
                      warn=record("warn"))
    reading._done.wait(10)
    assert said == []  # nothing said from the read's own thread
    read = reading.result()
    assert read.inventory.nodes == ()
    me = threading.current_thread().name
    assert said == [("say", f"nodes file {tmp_path / 'none.json'}: 0 GPU nodes", me),
                    ("warn", no_gpu_nodes(None), me)]


def test_an_error_of_the_read_is_raised_by_result(tmp_path: Path) -> None:
    reading = Reading(tmp_path / "absent.json", None, None, None)
    with pytest.raises(BadInput, match="absent.json: cannot read"):
        reading.result()


def test_wait_connected_returns_while_the_clusters_lists_are_still_on_the_wire(serve, tmp_path: Path) -> None:
    """The caller waits for the connection to be set up, not for the read: the API server here holds every LIST
    until the caller has stopped waiting."""
    from tests.support.loopback_http import loopback_kubeconfig, send

    release = threading.Event()

    def held(h) -> None:
        release.wait(10)
        send(h, b'{"kind":"List","metadata":{},"items":[]}')

    srv = serve(held)
    reading = Reading(None, str(loopback_kubeconfig(tmp_path, srv.url)), None, None, with_operator=True)
    reading.wait_connected(timeout=10)
    assert not reading._done.is_set()  # connected, its LISTs unanswered
    release.set()
    assert reading.result().inventory.nodes == ()
    assert any(p.startswith("/api/v1/nodes?") for p, _, _ in srv.seen)


def test_wait_connected_returns_when_the_read_fails_before_connecting(tmp_path: Path) -> None:
    reading = Reading(None, str(tmp_path / "no-such-kubeconfig"), None, None)
    reading.wait_connected(timeout=10)
    assert reading._done.is_set()
    with pytest.raises(BadInput, match="no-such-kubeconfig does not exist"):
        reading.result()


def test_a_command_that_fails_while_its_read_is_on_the_wire_leaves_without_finalizing_under_it(serve,
                                                                                               tmp_path: Path) -> None:
    """The registry fails while the API server still holds the LISTs: the command says so in one line and
    exits 2 at once, without tearing the interpreter down under the read's thread (which may be importing, or inside
    OpenSSL: a crash after the message). An exit hook of the process shows whether it was finalized."""
    import subprocess
    import sys

    from tests.support.loopback_http import loopback_kubeconfig, send

    release = threading.Event()

    def held(h) -> None:
        release.wait(30)
        send(h, b'{"kind":"List","metadata":{},"items":[]}')

    def failing_once_the_read_is_on_the_wire(h) -> None:
        for _ in range(200):
            if any(p.startswith("/api/v1/nodes?") for p, _, _ in srv.seen):
                break
            time.sleep(0.05)
        send(h, b"down", status=503)

    srv = serve(held)
    registry = serve(failing_once_the_read_is_on_the_wire)
    host = registry.url.removeprefix("http://")
    kubeconfig = loopback_kubeconfig(tmp_path, srv.url)
    script = ("import atexit, sys; atexit.register(print, 'finalized'); "
              "sys.argv = ['gpualign', *sys.argv[1:]]; from gpualign.cli.app import main; main()")
    try:
        proc = subprocess.run([sys.executable, "-c", script, "check", "--kubeconfig", str(kubeconfig),
                               "--ledger", f"registry://{host}/nvidia/driver"],
                              capture_output=True, text=True, timeout=25)
        assert any(p.startswith("/api/v1/nodes?") for p, _, _ in srv.seen)  # the read was on the wire
    finally:
        release.set()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"gpualign: error: registry {host}: listing tags of nvidia/driver: HTTP 503") \
        and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "finalized" not in proc.stdout


def test_a_wrong_flag_ends_the_command_before_any_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = ("import atexit, sys; atexit.register(print, 'finalized'); "
              "sys.argv = ['gpualign', *sys.argv[1:]]; from gpualign.cli.app import main; main()")
    proc = subprocess.run([sys.executable, "-c", script, "check", "--kubeconfig", str(tmp_path / "absent"),
                           "--ledger", "registry://127.0.0.1:1/nvidia/driver", "--driver-branch", "latest"],
                          capture_output=True, text=True, timeout=25)
    assert proc.returncode == 2 and "expected a major driver number" in proc.stderr, proc.stderr
    assert "does not exist" not in proc.stderr  # the kubeconfig was never opened
    # a one-shot read leaves its memory to the OS whole: the interpreter is not finalized
    assert proc.stdout == ""


def test_a_command_that_is_not_a_one_shot_read_is_finalized_as_usual() -> None:
    import subprocess
    import sys

    script = ("import atexit, sys; atexit.register(print, 'finalized'); "
              "sys.argv = ['gpualign', *sys.argv[1:]]; from gpualign.cli.app import main; main()")
    proc = subprocess.run([sys.executable, "-c", script, "cuda", "affinity", "--cuda", "twelve"],
                          capture_output=True, text=True, timeout=25)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.strip() == "finalized"


def test_a_one_shot_read_leaves_its_whole_report_written(tmp_path: Path) -> None:
    """Leaving without finalizing must not cut a large report short."""
    import os
    import subprocess
    import sys

    from ruamel.yaml import YAML

    nodes = {"items": [{"metadata": {"name": f"gpu-{i:05d}", "labels": {
        "nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/kernel-version.full": "6.1.0-41-amd64",
        "feature.node.kubernetes.io/system-os_release.ID": "debian",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12"}}} for i in range(1000)]}
    dump = tmp_path / "nodes.json"
    dump.write_text(json.dumps(nodes))
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("580-6.1.0-40-amd64-debian12\n")  # another kernel's: every node's image is missing
    for output in ("json", "yaml", "table"):  # the table and YAML are written through Python's buffered stdout
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        proc = subprocess.run([sys.executable, "-m", "gpualign", "check", "--nodes-file", str(dump), "--ledger",
                               str(ledger), "--driver-branch", "580", "-o", output],
                              capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 1, proc.stderr
        if output == "table":
            lines = proc.stdout.splitlines()
            assert sum(1 for line in lines if line.startswith("gpu-")) == 1000, lines[-2:]
            assert lines[-1].startswith("1000 GPU nodes: 0 present, 1000 missing"), lines[-1]
        else:
            report = json.loads(proc.stdout) if output == "json" else YAML(typ="safe").load(proc.stdout)
            assert len(report["nodes"]) == 1000 and report["summary"]["missing"] == 1000
    one = tmp_path / "one.json"  # a report smaller than stdout's buffer is still in it when the command ends
    one.write_text(json.dumps({"items": nodes["items"][:1]}))
    proc = subprocess.run([sys.executable, "-m", "gpualign", "check", "--nodes-file", str(one), "--ledger",
                           str(ledger), "--driver-branch", "580"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1].startswith("1 GPU nodes"), (proc.stdout, proc.stderr)
