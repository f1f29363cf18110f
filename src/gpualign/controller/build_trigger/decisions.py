"""What the controller's build trigger should do now (`gpualign controller --build`). Pure.

Input: the images GPU nodes wait for (a missing tag gpualign can make, with the nodes waiting and when the first of
them began to wait), the build Jobs the cluster has (one per tag, found by label, so a restarted or newly elected
leader adopts them), and the failures remembered on them. Output: which Jobs to create now, which tags queue behind
the cap (in the order their nodes began to wait), which wait out a backoff, and which are held after a permanent
failure until something changes.

The rules, against KMM's ("failed build pods are preserved and must be deleted manually"):
- one Job per tag, whatever the number of nodes waiting for it; never a second while one runs;
- at most `cap` Jobs run at once; the rest queue, oldest wait first, and a tag some node waits for now before any
  tag only built ahead (a node's next kernel, or the one Debian's archive announces), however long it was known;
- a transient failure (a registry's 5xx, the archive unreachable) is retried after a backoff that doubles from
  `backoff` up to `max_backoff`;
- a permanent one (no headers for that kernel, modules that fail verification, a refused push) is not retried until
  something changes: the recipe (gpualign's version) or an explicit retry (`gpualign build retry TAG`, which stamps
  the tag's Job with the time it was asked);
- nothing loops, and nothing is forgotten: each attempt is a Job of its own (`job_name(tag, attempt)`), so a retry
  never deletes the attempt before it; a finished attempt, its pod and log with it, is kept for `keep_failed`
  seconds (the Jobs' own `ttlSecondsAfterFinished`), and at most `keep_attempts` of a tag at once;
- a success is checked: a Job that succeeded while the controller's ledger, read after it, still lacks the tag
  (`unlisted`) counts as a failed attempt, retried after the same doubling backoff, its attempts counted on; a
  success the ledger listed and has lost since (`pruned`: a retention policy, a hand's delete) is made again at
  once, as the next attempt, whether a node runs its kernel now or announces it;
- a Job whose pod cannot be created (`FailedCreate`: Pod Security, a missing ServiceAccount) is `blocked`: it is
  never shown as building, and no second Job is made beside it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class BuildPhase(StrEnum):
    """Where a build Job is."""

    RUNNING = "running"  # created, its pod pending or running
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"  # its pod can never be created (a FailedCreate Event: Pod Security, quota, …)


class BuildFailure(StrEnum):
    """What a failed build's retry waits for."""

    TRANSIENT = "transient"  # a backoff: the same build may pass (a registry's 5xx, the archive unreachable)
    PERMANENT = "permanent"  # a change: the recipe, or an explicit `gpualign build retry`


JOB_PREFIX = "gpualign-build-"


@dataclass(frozen=True)
class Wanted:
    """A tag GPU nodes wait for, which gpualign can make (gpualign.model.makers: `build` or `mirror`)."""

    tag: str
    action: str
    nodes: tuple[str, ...]
    since: float  # when the first of its nodes began to wait (epoch seconds)
    arch: str = "amd64"  # the CPU architecture the image is for: its build runs on a node of it
    image: str = ""  # REPO:TAG, as the controller's ledger names it
    flavour: str = "proprietary"  # the kernel modules its nodes' driver pods load (gpualign.model.flavours)
    ahead: bool = False  # no node runs it yet (a node's next kernel, or the one Debian's archive announces)


@dataclass(frozen=True)
class BuildJob:
    """A build Job as the cluster has it."""

    name: str
    tag: str
    phase: BuildPhase
    attempt: int = 1
    recipe: str = ""  # the gpualign version that made the Job
    finished: float | None = None  # when it succeeded or failed
    failure: BuildFailure | None = None  # for a failed Job
    reason: str = ""  # the last words of its pod, for a failed Job
    retry_asked: float | None = None  # `gpualign build retry TAG`: when
    started: float | None = None  # when its pod started (the Job's startTime)
    nodes: tuple[str, ...] = ()  # the nodes waiting when it was made (its annotation)
    unlisted: bool = False  # succeeded, yet the ledger read after it does not list the tag
    pruned: bool = False  # succeeded, listed in the ledger read after it, and gone from the ledger since


@dataclass(frozen=True)
class Decision:
    create: tuple[tuple[Wanted, int], ...] = ()  # the tag and the attempt number of its new Job
    queued: tuple[str, ...] = ()  # behind the cap, in order
    backing_off: tuple[tuple[str, float], ...] = ()  # tag, when its retry is due
    held: tuple[tuple[str, str], ...] = ()  # tag, the permanent failure's reason
    running: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()  # Jobs whose pod cannot be created
    # finished Jobs to delete: those whose tag nobody waits for, past keep; earlier attempts past keep, or beyond the
    # newest `keep_attempts` of their tag
    stale: tuple[str, ...] = field(default_factory=tuple)


def job_name(tag: str, attempt: int = 1) -> str:
    """The deterministic Job name of a tag's attempt: a Kubernetes name (lower-case, at most 63 characters) that
    stays unique for tags that read alike once cut, by a hash of the whole tag. The first attempt is
    `gpualign-build-<tag>-<hash>`; a later one ends in `-<attempt>`, so a retry never takes its predecessor's name
    (and with it the failed attempt's pod and log)."""
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    body = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-")
    suffix = f"-{attempt}" if attempt > 1 else ""
    room = 63 - len(JOB_PREFIX) - len(digest) - 1 - len(suffix)
    return f"{JOB_PREFIX}{body[:room].rstrip('-')}-{digest}{suffix}"


def latest(jobs: Iterable[BuildJob]) -> dict[str, BuildJob]:
    """tag -> its newest attempt's Job: the one that speaks for the tag."""
    out: dict[str, BuildJob] = {}
    for j in jobs:
        if j.tag and (j.tag not in out or j.attempt > out[j.tag].attempt):
            out[j.tag] = j
    return out


def backoff_for(attempt: int, base: float, limit: float) -> float:
    """The wait before retrying after `attempt` transient failures: base, 2·base, 4·base, … up to limit."""
    return float(min(limit, base * 2.0 ** max(0, attempt - 1)))


def decide(wanted: Iterable[Wanted], jobs: Iterable[BuildJob], *, cap: int, now: float, recipe: str,
           backoff: float = 30.0, max_backoff: float = 1800.0, keep_failed: float = 86400.0,
           keep_attempts: int = 3) -> Decision:
    jobs = list(jobs)
    by_tag = latest(jobs)
    waiting = sorted(wanted, key=lambda w: (w.ahead, w.since, w.tag))  # a node waiting now before any ahead
    wanted_tags = {w.tag for w in waiting}
    running = [t for t, j in by_tag.items() if j.phase == BuildPhase.RUNNING]
    blocked = [t for t, j in by_tag.items() if j.phase == BuildPhase.BLOCKED]
    slots = max(0, cap - len(running) - len(blocked))  # a Job that cannot start still holds its place
    create: list[tuple[Wanted, int]] = []
    queued: list[str] = []
    backing_off: list[tuple[str, float]] = []
    held: list[tuple[str, str]] = []
    for w in waiting:
        job = by_tag.get(w.tag)
        attempt = 1
        if job is not None:
            if job.phase in (BuildPhase.RUNNING, BuildPhase.BLOCKED):
                continue
            if job.phase == BuildPhase.SUCCEEDED:
                # built, listed, and gone since (a retention policy pruned it): made again at once, its attempt
                # counted. Built and still missing: until a ledger read after it says the tag is not there, wait;
                # then it counts as a failed attempt, retried after the doubling backoff
                if not job.pruned and not job.unlisted:
                    continue
                if job.unlisted:
                    due = (job.finished or now) + backoff_for(job.attempt, backoff, max_backoff)
                    asked = job.retry_asked is not None and (job.finished is None or job.retry_asked >= job.finished)
                    if not asked and now < due:
                        backing_off.append((w.tag, due))
                        continue
            elif job.phase == BuildPhase.FAILED:
                asked = job.retry_asked is not None and (job.finished is None or job.retry_asked >= job.finished)
                if job.failure == BuildFailure.PERMANENT and not asked and job.recipe == recipe:
                    held.append((w.tag, job.reason))
                    continue
                due = (job.finished or now) + backoff_for(job.attempt, backoff, max_backoff)
                if job.failure != BuildFailure.PERMANENT and not asked and job.recipe == recipe and now < due:
                    backing_off.append((w.tag, due))
                    continue
            attempt = job.attempt + 1
        if slots <= 0:
            queued.append(w.tag)
            continue
        slots -= 1
        create.append((w, attempt))  # a Job of its own: the attempt before it stays, with its log
    return Decision(create=tuple(create), queued=tuple(queued), backing_off=tuple(backing_off), held=tuple(held),
                    running=tuple(running), blocked=tuple(blocked),
                    stale=_stale(jobs, by_tag, wanted_tags, now, keep_failed, keep_attempts))


def _stale(jobs: list[BuildJob], newest: dict[str, BuildJob], wanted: set[str], now: float, keep: float,
           keep_attempts: int) -> tuple[str, ...]:
    """Finished Jobs to delete: a tag's newest attempt once nobody waits for it and it is past `keep`; an earlier
    attempt past `keep`, or beyond its tag's newest `keep_attempts`. A running or blocked Job is never stale."""
    by_tag: dict[str, list[BuildJob]] = {}
    for j in jobs:
        by_tag.setdefault(j.tag, []).append(j)
    out: list[str] = []
    for tag, of_tag in sorted(by_tag.items()):
        for rank, j in enumerate(sorted(of_tag, key=lambda j: j.attempt, reverse=True)):
            if j.phase in (BuildPhase.RUNNING, BuildPhase.BLOCKED):
                continue
            old = j.finished is not None and now - j.finished > keep
            if j is newest[tag]:
                if tag not in wanted and old:
                    out.append(j.name)
            elif old or rank >= keep_attempts:
                out.append(j.name)
    return tuple(out)
