"""List, then watch from the list's resourceVersion; resume after a dropped connection, list again on 410 Gone."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpualign.base.errors import GpualignError, NotFound
from gpualign.base.json_types import JSON
from gpualign.kube.client import Kube

log = logging.getLogger("gpualign.controller")


class Watcher(threading.Thread):
    """Keeps `on_sync(items)` (after each LIST) and `on_event(type, obj)` (after each watch event) fed."""

    def __init__(self, kube: Kube, path: str, *, label_selector: str | None, metadata_only: bool,
                 on_sync: Callable[[list[JSON]], None], on_event: Callable[[str, JSON], None],
                 stop: threading.Event, name: str, field_selector: str | None = None,
                 logger: logging.Logger = log, timeout_seconds: int = 30,
                 absent_retry: float | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.kube, self.path, self.selector, self.metadata_only = kube, path, label_selector, metadata_only
        self.field_selector, self.log, self.timeout_seconds = field_selector, logger, timeout_seconds
        self.on_sync, self.on_event, self.stop_event = on_sync, on_event, stop
        # an API the cluster may not serve (resource.k8s.io/v1 before Kubernetes 1.34): its 404 is an empty list,
        # asked again every `absent_retry` seconds, not an error retried at once
        self.absent_retry = absent_retry
        self.resource_version: str | None = None
        self.relists = 0
        self.resumes = 0

    def _list(self) -> None:
        items: list[JSON] = []
        params: dict[str, Any] = {"limit": 500}
        if self.selector:
            params["labelSelector"] = self.selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        accept = ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
                  if self.metadata_only else "application/json")
        while True:
            page = self.kube.get_json(self.path, params=params, accept=accept)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            params["continue"] = token
        self.resource_version = page["metadata"]["resourceVersion"]
        self.relists += 1
        self.on_sync(items)

    def run(self) -> None:
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                for kind, obj in self.kube.watch_raw(self.path, label_selector=self.selector,
                                                     field_selector=self.field_selector,
                                                     resource_version=self.resource_version,
                                                     timeout_seconds=self.timeout_seconds,
                                                     metadata_only=self.metadata_only):
                    if self.stop_event.is_set():
                        return
                    if kind == "ERROR":
                        self.log.info("%s: watch expired (%s): listing again", self.name, obj.get("message", "?"))
                        self.resource_version = None
                        break
                    self.resource_version = (obj.get("metadata") or {}).get("resourceVersion",
                                                                              self.resource_version)
                    if kind != "BOOKMARK":
                        self.on_event(kind, obj)
                else:
                    self.resumes += 1  # the server closed the watch: resume from the last resourceVersion
                backoff = 0.5
            except NotFound as err:
                if self.absent_retry is None:
                    self._retry(err, backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                if self.relists == 0:
                    self.log.info("%s: not served here (%s); asking again every %.0fs", self.name, err.message,
                                  self.absent_retry)
                self.on_sync([])  # an API gone since it was served has no objects left either
                self.resource_version = None
                self.relists += 1
                self.stop_event.wait(self.absent_retry)
            except GpualignError as err:
                if "HTTP 410" in err.message:  # the resourceVersion is too old: list again
                    self.resource_version = None
                self._retry(err, backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:  # noqa: BLE001 - a watcher must never die silently
                self.log.exception("%s: unexpected error; listing again", self.name)
                self.resource_version = None
                time.sleep(1)

    def _retry(self, err: GpualignError, backoff: float) -> None:
        self.log.warning("%s: %s; retrying in %.1fs", self.name, err.message, backoff)
        self.resumes += 1
        self.stop_event.wait(backoff)
