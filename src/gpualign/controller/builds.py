"""What the controller's build trigger should do now (`gpualign controller --build`). Pure.

Input: the images GPU nodes wait for (a missing tag gpualign can make, with the nodes waiting and when the first of
them began to wait), the build Jobs the cluster has (one per tag, found by label, so a restarted or newly elected
leader adopts them), and the failures remembered on them. Output: which Jobs to create now, which tags queue behind
the cap (in the order their nodes began to wait), which wait out a backoff, and which are held after a permanent
failure until something changes.

The rules, against KMM's ("failed build pods are preserved and must be deleted manually"):
- one Job per tag, whatever the number of nodes waiting for it; never a second while one runs;
- at most `cap` Jobs run at once; the rest queue, oldest wait first;
- a transient failure (a registry's 5xx, the archive unreachable) is retried after a backoff that doubles from
  `backoff` up to `max_backoff`;
- a permanent one (no headers for that kernel, modules that fail verification, a refused push) is not retried until
  something changes: the recipe (gpualign's version) or an explicit retry (`gpualign build retry TAG`, which stamps
  the tag's Job with the time it was asked);
- nothing loops: a Job that failed is kept (with its log) for `keep_failed` seconds and replaced only by a retry;
- a success is checked: a Job that succeeded while the controller's ledger, read after it, still lacks the tag
  (`unlisted`) counts as a failed attempt, retried after the same doubling backoff, its attempts counted on;
- a Job whose pod cannot be created (`FailedCreate`: Pod Security, a missing ServiceAccount) is `blocked`: it is
  never shown as building, and no second Job is made beside it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

RUNNING, SUCCEEDED, FAILED, BLOCKED = "running", "succeeded", "failed", "blocked"
TRANSIENT, PERMANENT = "transient", "permanent"
JOB_PREFIX = "gpualign-build-"


@dataclass(frozen=True)
class Wanted:
    """A tag GPU nodes wait for, which gpualign can make (gpualign.makers: `build` or `mirror`)."""

    tag: str
    action: str
    nodes: tuple[str, ...]
    since: float  # when the first of its nodes began to wait (epoch seconds)
    arch: str = "amd64"  # the CPU architecture the image is for: its build runs on a node of it
    image: str = ""  # REPO:TAG, as the controller's ledger names it


@dataclass(frozen=True)
class BuildJob:
    """A build Job as the cluster has it."""

    name: str
    tag: str
    phase: str  # running | blocked (its pod cannot be created) | succeeded | failed
    attempt: int = 1
    recipe: str = ""  # the gpualign version that made the Job
    finished: float | None = None  # when it succeeded or failed
    failure: str | None = None  # transient | permanent, for a failed Job
    reason: str = ""  # the last words of its pod, for a failed Job
    retry_asked: float | None = None  # `gpualign build retry TAG`: when
    started: float | None = None  # when its pod started (the Job's startTime)
    nodes: tuple[str, ...] = ()  # the nodes waiting when it was made (its annotation)
    unlisted: bool = False  # succeeded, yet the ledger read after it does not list the tag


@dataclass(frozen=True)
class Decision:
    create: tuple[tuple[Wanted, int], ...] = ()  # the tag and the attempt number of its new Job
    replace: tuple[str, ...] = ()  # failed Jobs to delete first (their tag is retried now)
    queued: tuple[str, ...] = ()  # behind the cap, in order
    backing_off: tuple[tuple[str, float], ...] = ()  # tag, when its retry is due
    held: tuple[tuple[str, str], ...] = ()  # tag, the permanent failure's reason
    running: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()  # Jobs whose pod cannot be created
    stale: tuple[str, ...] = field(default_factory=tuple)  # finished Jobs whose tag nobody waits for, past keep


def job_name(tag: str) -> str:
    """The deterministic Job name of a tag: a Kubernetes name (lower-case, at most 63 characters) that stays unique
    for tags that read alike once cut, by a hash of the whole tag."""
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    body = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-")
    room = 63 - len(JOB_PREFIX) - len(digest) - 1
    return f"{JOB_PREFIX}{body[:room].rstrip('-')}-{digest}"


def backoff_for(attempt: int, base: float, limit: float) -> float:
    """The wait before retrying after `attempt` transient failures: base, 2·base, 4·base, … up to limit."""
    return float(min(limit, base * 2.0 ** max(0, attempt - 1)))


def decide(wanted: Iterable[Wanted], jobs: Iterable[BuildJob], *, cap: int, now: float, recipe: str,
           backoff: float = 30.0, max_backoff: float = 1800.0, keep_failed: float = 86400.0) -> Decision:
    by_tag = {j.tag: j for j in jobs}
    waiting = sorted(wanted, key=lambda w: (w.since, w.tag))
    wanted_tags = {w.tag for w in waiting}
    running = [t for t, j in by_tag.items() if j.phase == RUNNING]
    blocked = [t for t, j in by_tag.items() if j.phase == BLOCKED]
    slots = max(0, cap - len(running) - len(blocked))  # a Job that cannot start still holds its place
    create: list[tuple[Wanted, int]] = []
    replace: list[str] = []
    queued: list[str] = []
    backing_off: list[tuple[str, float]] = []
    held: list[tuple[str, str]] = []
    for w in waiting:
        job = by_tag.get(w.tag)
        attempt = 1
        if job is not None:
            if job.phase in (RUNNING, BLOCKED):
                continue
            if job.phase == SUCCEEDED:
                # built, and still missing: until a ledger read after it says the tag is not there, wait; then it
                # counts as a failed attempt, retried after the doubling backoff
                if not job.unlisted:
                    continue
                due = (job.finished or now) + backoff_for(job.attempt, backoff, max_backoff)
                asked = job.retry_asked is not None and (job.finished is None or job.retry_asked >= job.finished)
                if not asked and now < due:
                    backing_off.append((w.tag, due))
                    continue
            elif job.phase == FAILED:
                asked = job.retry_asked is not None and (job.finished is None or job.retry_asked >= job.finished)
                if job.failure == PERMANENT and not asked and job.recipe == recipe:
                    held.append((w.tag, job.reason))
                    continue
                due = (job.finished or now) + backoff_for(job.attempt, backoff, max_backoff)
                if job.failure != PERMANENT and not asked and job.recipe == recipe and now < due:
                    backing_off.append((w.tag, due))
                    continue
            attempt = job.attempt + 1
        if slots <= 0:
            queued.append(w.tag)
            continue
        slots -= 1
        create.append((w, attempt))
        if job is not None:
            replace.append(job.name)  # the finished Job goes first: the new one takes its name
    stale = tuple(j.name for t, j in by_tag.items() if t not in wanted_tags and j.phase not in (RUNNING, BLOCKED)
                  and j.finished is not None and now - j.finished > keep_failed)
    return Decision(tuple(create), tuple(replace), tuple(queued), tuple(backing_off), tuple(held), tuple(running),
                    tuple(blocked), stale)
