"""A read begun in the background says nothing until its result is asked for, then says what it would have said,
in order, in the caller's thread; its error is raised there, as read_nodes would have raised it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gpualign.errors import BadInput
from gpualign.usecases.nodes import Reading


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
                    ("warn", "no GPU nodes (nodes labelled nvidia.com/gpu.present=true)", me)]


def test_an_error_of_the_read_is_raised_by_result(tmp_path: Path) -> None:
    reading = Reading(tmp_path / "absent.json", None, None, None)
    with pytest.raises(BadInput, match="absent.json: cannot read"):
        reading.result()


def test_wait_connected_returns_while_the_clusters_lists_are_still_on_the_wire(serve, tmp_path: Path) -> None:
    """The caller waits for the connection to be set up, not for the read: the API server here holds every LIST
    until the caller has stopped waiting."""
    from tests.loopback_http import send, token_kubeconfig

    release = threading.Event()

    def held(h) -> None:
        release.wait(10)
        send(h, b'{"kind":"List","metadata":{},"items":[]}')

    srv = serve(held)
    reading = Reading(None, str(token_kubeconfig(tmp_path, srv.url)), None, None, with_operator=True)
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
