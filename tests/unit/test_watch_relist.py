"""The Watcher lists again when the API server answers a watch with 410 Gone (its resourceVersion was compacted
away), both as an ERROR event in the stream and as an HTTP 410; and it resumes (no LIST) after a plain cut."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from gpualign.base.errors import Unreachable
from gpualign.kube.watch import Watcher


class ScriptedKube:
    """A stand-in API server: each watch call plays the next scripted step."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps
        self.lists = 0
        self.watched_from: list[str | None] = []

    def get_json(self, path: str, *, params: dict[str, Any] | None = None, accept: str = "") -> dict[str, Any]:
        self.lists += 1
        return {"metadata": {"resourceVersion": f"{100 * self.lists}"},
                "items": [{"metadata": {"name": "n1", "resourceVersion": f"{100 * self.lists}"}}]}

    def watch_raw(self, path: str, **kw: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(kw.get("resource_version"))
        step = self.steps.pop(0) if self.steps else "idle"
        if step == "idle":
            threading.Event().wait(0.05)
            return
        if isinstance(step, Exception):
            raise step
        yield from step


def run(steps: list[Any], until) -> tuple[ScriptedKube, Watcher, list[tuple[str, str]]]:  # noqa: ANN001
    kube = ScriptedKube(steps)
    events: list[tuple[str, str]] = []
    stop = threading.Event()
    w = Watcher(kube, "/api/v1/nodes", label_selector=None, metadata_only=True, on_sync=lambda _items: None,
                on_event=lambda kind, obj: events.append((kind, obj["metadata"]["resourceVersion"])), stop=stop,
                name="w")
    w.start()
    for _ in range(200):
        if until(kube, w):
            break
        threading.Event().wait(0.02)
    stop.set()
    w.join(5)
    return kube, w, events


def test_an_error_event_410_lists_again_and_watches_from_the_new_list():
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 5 (900)"}
    steps = [[("MODIFIED", {"metadata": {"name": "n1", "resourceVersion": "101"}}), ("ERROR", expired)],
             [("MODIFIED", {"metadata": {"name": "n1", "resourceVersion": "201"}})]]
    kube, w, events = run(steps, lambda k, _w: k.lists >= 2 and len(k.watched_from) >= 2 and not k.steps)
    assert kube.lists == 2 and w.relists == 2
    assert kube.watched_from[:2] == ["100", "200"]  # the second watch starts from the second LIST
    assert events == [("MODIFIED", "101"), ("MODIFIED", "201")]


def test_an_http_410_lists_again_and_a_plain_cut_resumes():
    steps = [Unreachable("watch /api/v1/nodes broken: peer closed connection"),  # a cut: resume, no LIST
             Unreachable("WATCH /api/v1/nodes: HTTP 410: too old resource version"),  # 410: LIST again
             [("MODIFIED", {"metadata": {"name": "n1", "resourceVersion": "250"}})]]
    kube, w, events = run(steps, lambda k, _w: not k.steps and len(k.watched_from) >= 3)
    assert kube.watched_from[:3] == ["100", "100", "200"]
    assert kube.lists == 2 and events == [("MODIFIED", "250")]
