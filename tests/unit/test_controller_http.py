"""The controller's HTTP server: a client that leaves before its answer is written is no failure of the controller
(nothing on stderr, nothing in its log), and a request that does fail is one line in its log, not a traceback."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time

import httpx2
from prometheus_client import CollectorRegistry

from gpualign.controller.server import serve

BIG = {"nodes": [{"name": f"gpu-{i}", "driver": "580.95.05", "why": "x" * 200} for i in range(20000)]}


def _reset_mid_answer(port: int, path: str) -> None:
    """Ask, read a few bytes of the answer, then reset the connection (SO_LINGER 0): the server's write fails."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: controller\r\n\r\n".encode())
        s.recv(16)


def test_a_client_that_leaves_mid_answer_leaves_no_trace(capfd, caplog):
    server = serve(("127.0.0.1", 0), CollectorRegistry(), lambda: BIG)
    try:
        port = server.server_address[1]
        with caplog.at_level(logging.DEBUG, logger="gpualign.controller"):
            for _ in range(3):
                _reset_mid_answer(port, "/api/fleet")
            # the server still answers, and has by now met the resets (each answer is MBs: its write failed)
            assert httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=5).text == "ok\n"
            time.sleep(0.5)
        err = capfd.readouterr().err
        assert "Exception occurred" not in err and "Traceback" not in err, err
        assert not [r for r in caplog.records if r.name == "gpualign.controller"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_that_fails_is_one_line_in_the_log(capfd, caplog):
    def broken() -> dict:
        raise KeyError("nodes")

    server = serve(("127.0.0.1", 0), CollectorRegistry(), broken)
    try:
        port = server.server_address[1]
        with caplog.at_level(logging.INFO, logger="gpualign.controller"):
            with contextlib.suppress(httpx2.HTTPError):  # the connection is closed with no answer
                httpx2.get(f"http://127.0.0.1:{port}/api/fleet", timeout=5)
            deadline = time.monotonic() + 5
            while not caplog.records and time.monotonic() < deadline:
                time.sleep(0.05)
        (record,) = [r for r in caplog.records if r.name == "gpualign.controller"]
        assert record.levelno == logging.ERROR and not record.exc_info
        assert record.getMessage() == "http: answering 127.0.0.1 failed: KeyError: 'nodes'"
        assert "Traceback" not in capfd.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
