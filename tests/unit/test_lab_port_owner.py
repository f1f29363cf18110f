"""A probe's answer counts only from the process that holds the port: `processes.listens_on` reads who listens,
and `wait_until(port=…)` does not take another process's answer for the one it waits on."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from gpualign.base.errors import LabError
from gpualign.lab import processes


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_process_listens_on_the_port_it_bound_and_on_no_other(tmp_path):
    mine = _listening()
    try:
        assert processes.listens_on(os.getpid(), mine.getsockname()[1])
        free = processes.free_port()
        assert not processes.listens_on(os.getpid(), free)
        child = processes.start("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"],
                                tmp_path / "sleeper.log")
        try:
            assert not processes.listens_on(child.pid, mine.getsockname()[1])  # held by this process, not the child
        finally:
            processes.stop(child)
    finally:
        mine.close()


def test_a_bound_but_not_listening_socket_is_not_listening():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert not processes.listens_on(os.getpid(), s.getsockname()[1])


def test_wait_until_does_not_take_another_process_answer_for_its_own(tmp_path):
    """A component whose port another process holds must not be found ready by that other process's answer."""
    foreign = _listening()
    port = foreign.getsockname()[1]
    child = processes.start("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"],
                            tmp_path / "sleeper.log")
    asked: list[float] = []
    try:
        with pytest.raises(LabError, match="not serving after 1s"):
            processes.wait_until(child, lambda: asked.append(time.monotonic()) is None, timeout=1, what="serving",
                                 port=port)
        assert not asked  # the probe is not even asked while another process holds the port
        processes.wait_until(child, lambda: True, timeout=1, what="serving")  # without port=, the probe decides
    finally:
        processes.stop(child)
        foreign.close()


def test_wait_until_takes_the_answer_once_the_process_itself_listens(tmp_path):
    port = processes.free_port()
    server = processes.start("server", [sys.executable, "-c", (
        "import socket, time\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
        "s.listen(); time.sleep(30)\n")], tmp_path / "server.log")
    try:
        processes.wait_until(server, lambda: True, timeout=10, what="listening", port=port)
        assert processes.listens_on(server.pid, port)
    finally:
        processes.stop(server)


def test_a_component_that_lost_its_port_says_so_when_it_exits(tmp_path):
    """The port a component was given, bound by another process first: its exit at start says the port was taken
    (what `lab up` chooses a new port on), and an exit for another reason does not."""
    held = _listening()
    port = held.getsockname()[1]
    try:
        for program, taken in ((f"import socket; socket.socket().bind(('127.0.0.1', {port}))", True),
                               ("raise SystemExit('no config')", False)):
            proc = processes.start("component", [sys.executable, "-c", program], tmp_path / f"{taken}.log")
            with pytest.raises(processes.ExitedAtStart) as exited:
                processes.wait_until(proc, lambda: False, timeout=10, what="serving", port=port)
            assert exited.value.port_taken is taken, exited.value.detail
    finally:
        held.close()
