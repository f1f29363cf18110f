"""Python's cyclic garbage collector, held off while a large read is parsed.

Parsing a LIST page makes tens of thousands of small dicts and strings, none of them in a cycle. Each 700 new
objects start a collector pass, and each pass walks the older generations too: reading 5,000 nodes spent most of
its parsing time in those passes (a 1.8 MB page: 55-85 ms with the collector, 17 ms without). While any read holds
it off, no pass runs; when the last one ends, the collector is as it was. Reads in several threads share the hold.

A one-shot read (check, status, why, plan) also ends without freeing what it made: `keep` holds its report to the
end, and the process leaves without tearing the interpreter down (cli.app), the OS taking its memory back at once.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = True


@contextmanager
def held_off() -> Iterator[None]:
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


# One-shot reads: every object they make lives until the command ends, and none is in a cycle worth finding, so
# they run with the collector off from start-up (imports included) to exit. A --watch refreshes until interrupted,
# and every other command may run for hours (a walk, the controller): they keep it.
ONE_SHOT_READS = frozenset({"check", "status", "why", "plan"})


_one_shot = False
_kept: list[object] = []


def for_command(args: list[str]) -> None:
    """Turn the collector back on unless `args` name a one-shot read (main() starts with it off)."""
    global _one_shot
    first = next((a for a in args if not a.startswith("-")), None)
    if first not in ONE_SHOT_READS or "--watch" in args or "-w" in args:
        gc.enable()
    else:
        _one_shot = True


def one_shot() -> bool:
    """Whether this process runs a one-shot read: it ends by handing its memory back to the OS whole (the process
    leaves without finalizing the interpreter), never by freeing its objects one by one."""
    return _one_shot


def keep(*objects: object) -> None:
    """In a one-shot read, hold `objects` (a report, the nodes read) to the end of the process: freeing 5,000 nodes'
    findings and report dictionaries one by one as the command returned was ~15-20 ms of a check, for memory the OS
    takes back at once."""
    if _one_shot:
        _kept.extend(objects)
