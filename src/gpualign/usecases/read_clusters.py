"""Several clusters read at once: each context in its own thread, bounded by one deadline, one bad cluster reported
in one line without spoiling the rest. The merge of their reports is gpualign.model.fleet_report (pure)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpualign.base.errors import GpualignError
from gpualign.model.fleet_report import ClusterRead


def read_all(names: list[str], read_one: Callable[[str], tuple[dict[str, Any], bool, str | None]],
             limit: float | None, word: Callable[[GpualignError], str] = lambda err: err.message) -> list[ClusterRead]:
    """read_one(context) -> (report body, clean, server) for every context at once, each in a daemon thread (so a
    hung cluster cannot hold the process); past `limit` seconds a cluster still reading is reported unreadable.
    word: a cluster's refusal in one line (the command line's, naming its flags)."""
    results: dict[str, ClusterRead] = {}
    lock = threading.Lock()

    def run(name: str) -> None:
        try:
            body, clean, server = read_one(name)
            outcome = ClusterRead(name, server, body, None, clean)
        except GpualignError as err:
            outcome = ClusterRead(name, None, None, word(err))
        except Exception as err:  # a cluster's failure is its own line, never the whole report's
            outcome = ClusterRead(name, None, None, f"{err.__class__.__name__}: {err}")
        with lock:
            results.setdefault(name, outcome)

    threads = {n: threading.Thread(target=run, args=(n,), daemon=True, name=f"cluster-{n}") for n in names}
    start = time.monotonic()
    for t in threads.values():
        t.start()
    for name, t in threads.items():
        t.join(None if limit is None else max(0.0, start + limit - time.monotonic()))
        if t.is_alive():
            with lock:
                results.setdefault(name, ClusterRead(name, None, None,
                                                     f"no complete answer within --request-timeout {limit:g}s"))
    return [results[n] for n in names]
