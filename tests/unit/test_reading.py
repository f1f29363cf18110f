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
