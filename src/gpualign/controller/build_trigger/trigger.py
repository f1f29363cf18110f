"""The build trigger (`gpualign controller --build`): the images GPU nodes wait for, made by Kubernetes Jobs that
run gpualign's own `ensure`, with nobody typing.

Each pass reads the controller's findings (the same audit `check` runs: a missing tag and who makes it,
gpualign.model.makers), lists the build Jobs by label (so a restarted or newly elected leader adopts the ones that
exist), reads each failed Job's pod for its reason and each pod-less Job's FailedCreate Event, checks each success
against a fresh read of the ledger, asks decisions.py what to do, and does it: creates the new Jobs (a retry is a Job
of its own, so the failed attempt's pod and log stay), deletes the finished ones past keeping, and posts an Event on
every waiting node when a build starts, fails, cannot start, lands, or lands nowhere the ledger can see.
A tag gpualign cannot build (`render`, `none`) gets no Job:
an Event on its nodes says so and names the command, and a metric counts it.
Only the leader writes. A Job's name is its tag's and attempt's, so a second create of the same attempt is a 409 and
adopts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpualign.base.errors import GpualignError
from gpualign.controller.build_trigger import decisions as B
from gpualign.controller.build_trigger import job as J
from gpualign.controller.build_trigger.jobs_api import BuildJobs
from gpualign.controller.node_finding import NodeFinding
from gpualign.kube.client import Kube
from gpualign.model.audit import Status
from gpualign.model.makers import JOB_MAKERS, Maker

log = logging.getLogger("gpualign.controller")
BUILDABLE = tuple(str(m) for m in JOB_MAKERS)  # who makes it: gpualign's ensure, in a Job
REPLACE = "replace"  # check's action for a present-but-wrong image: made again only when the value says so

EVENT_CREATED, EVENT_FAILED, EVENT_SUCCEEDED = "DriverImageBuildStarted", "DriverImageBuildFailed", \
    "DriverImageBuilt"
EVENT_UNLISTED = "DriverImageBuiltNotListed"  # the Job succeeded; the ledger, read after it, lacks the tag
EVENT_PRUNED = "DriverImagePruned"  # the Job succeeded, the ledger listed the tag, and has lost it since
EVENT_BLOCKED = "DriverImageBuildCannotStart"  # the Job's pod cannot be created
EVENT_NOT_BUILDABLE = "DriverImageNotBuildable"  # gpualign does not build it (render: its recipe; none)


@dataclass
class BuildOptions:
    settings: J.BuildSettings
    cap: int = 1  # --max-concurrent-builds
    interval: float = 5.0  # seconds between passes (a new missing tag wakes one at once)
    backoff: float = 30.0
    max_backoff: float = 1800.0
    recipe: str = ""  # gpualign's version: a new one lifts every hold
    replace_wrong: bool = False  # --build-replace-wrong: make a present-but-wrong image again (ensure --replace-wrong)


@dataclass
class BuildTrigger:
    """The build trigger behind three verbs: `sync` (decide, and create what is decided), `garbage_collect` (delete
    finished Jobs past keeping) and `status` (each tag's build as last read, for the board and the metrics)."""

    kube: Kube
    options: BuildOptions
    findings: Callable[[], Mapping[str, NodeFinding]]  # node -> its finding (the controller's cache)
    is_leader: Callable[[], bool] = lambda: True
    on_started: Callable[[str], None] = lambda _tag: None
    on_finished: Callable[[str, str, float | None], None] = lambda _tag, _result, _seconds: None
    waiting_since: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, tag) -> since, this process
    reported: dict[str, tuple[str, int]] = field(default_factory=dict)  # tag -> (phase, attempt) said in Events
    last: B.Decision = field(default_factory=B.Decision)
    jobs: dict[str, B.BuildJob] = field(default_factory=dict)  # tag -> its Job, as last read
    wake: threading.Event = field(default_factory=threading.Event)
    # node -> the finding for its next kernel (gpualign.io/kernel.next): built ahead, before the reboot
    ahead: Callable[[], Mapping[str, NodeFinding]] = dict
    # tag -> every node that waited for it while its build ran (told when it lands, though by then the image is
    # present and they wait no more)
    waiters: dict[str, set[str]] = field(default_factory=dict)
    # image (REPO:TAG) -> whether the controller's ledger lists it, read anew (after a Job said it pushed it)
    listed: Callable[[str], bool] = lambda _image: True
    ledger_name: str = ""  # the ledger the controller reads, as Events name it
    # (Job name, attempt) -> its success was checked against a fresh ledger read: True listed, False not
    confirmed: dict[tuple[str, int], bool] = field(default_factory=dict)
    # tag -> (who makes it, why, its nodes): missing images gpualign does not build (no Job is made for them)
    refused: dict[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)
    refused_told: set[tuple[str, str]] = field(default_factory=set)  # (node, tag) told by an Event
    present: set[str] = field(default_factory=set)  # tags a node's finding found in the ledger, at the last pass
    api: BuildJobs = field(init=False)

    def __post_init__(self) -> None:
        self.api = BuildJobs(self.kube, self.options.settings.namespace, self.is_leader)

    # -- what nodes wait for ---------------------------------------------------------------------------------------
    def wanted(self, now: float) -> list[B.Wanted]:
        """The tags nodes wait for now: their current kernel's, and their next kernel's (built ahead)."""
        by_tag: dict[str, set[str]] = {}
        actions: dict[str, str] = {}
        archs: dict[str, str] = {}
        images: dict[str, str] = {}
        flavours: dict[str, str] = {}
        waiting: set[tuple[str, str]] = set()
        now_running: set[str] = set()  # tags a node runs now (not only ahead)
        refused: dict[str, tuple[str, str, set[str]]] = {}
        present: set[str] = set()
        for current, source in ((True, self.findings()), (False, self.ahead())):
            for node, f in source.items():
                tag, action = f.tag, f.to_do
                if not tag:
                    continue
                if f.status == Status.PRESENT:
                    present.add(tag)
                wrong = self.options.replace_wrong and f.status == Status.WRONG_IMAGE and action == REPLACE
                if f.status == Status.MISSING and action in (Maker.RENDER, Maker.NONE):
                    # a pool Debian's archive announces for: told on the pool's own nodes
                    told = f.pool.nodes if f.pool is not None and f.pool.nodes else (node,)
                    refused.setdefault(tag, (action, f.why_not_made or "", set()))[2].update(told)
                    continue
                if action is not None and (wrong or f.status == Status.MISSING and action in BUILDABLE):
                    by_tag.setdefault(tag, set()).add(node)
                    actions[tag] = action
                    # a mirror is a copy: it runs where gpualign's own image runs (amd64)
                    archs[tag] = f.arch or "amd64" if action != Maker.MIRROR else "amd64"
                    images[tag] = f.image or ""
                    flavours[tag] = f.modules or "proprietary"
                    waiting.add((node, tag))
                    if current:
                        now_running.add(tag)
                    self.waiting_since.setdefault((node, tag), now)
        for key in [k for k in self.waiting_since if k not in waiting]:
            del self.waiting_since[key]
        self.refused = {t: (a, why, tuple(sorted(n))) for t, (a, why, n) in refused.items()}
        self.present = present
        return [B.Wanted(tag=tag, action=actions[tag], nodes=tuple(sorted(nodes)),
                         since=min(self.waiting_since[(n, tag)] for n in nodes),
                         arch=archs[tag], image=images[tag], flavour=flavours[tag], ahead=tag not in now_running)
                for tag, nodes in by_tag.items()]

    # -- one pass ------------------------------------------------------------------------------------------------
    def _confirm(self, jobs: list[B.BuildJob], wanted: list[B.Wanted]) -> list[B.BuildJob]:
        """Each succeeded Job whose tag nodes still wait for, checked against a fresh read of the ledger: never
        listed there, it is `unlisted` (a Warning, and a retry after the backoff, its attempt counted); listed once
        and gone now, it is `pruned` (made again at once). A tag the ledger listed is read again on every pass its
        nodes still wait for it: the controller's view of the ledger lags a push, and only a fresh read tells a lag
        from a prune."""
        import dataclasses

        images = {w.tag: w.image for w in wanted}
        out = []
        for job in jobs:
            if job.phase == B.BuildPhase.SUCCEEDED and job.tag in self.present and job.tag not in images:
                # its nodes found it in the ledger (the view is a read of it): listed after the Job, whatever
                # process watched it land; so a later absence is a prune, not a push that never happened
                self.confirmed[(job.name, job.attempt)] = True
            if job.phase == B.BuildPhase.SUCCEEDED and job.tag in images:
                key = (job.name, job.attempt)
                was = self.confirmed.get(key)
                if was is None or was:
                    try:
                        listed = self.listed(images[job.tag])
                    except GpualignError as err:
                        log.warning("build Job %s succeeded; the ledger could not be read to check it: %s",
                                    job.name, err.message)
                        out.append(job)
                        continue
                    if was and not listed:
                        log.warning("driver image %s, built by Job %s, has left the ledger since: building it "
                                    "again", job.tag, job.name)
                        job = dataclasses.replace(job, pruned=True)
                    else:
                        self.confirmed[key] = listed
                if self.confirmed.get(key) is False:
                    job = dataclasses.replace(job, unlisted=True)
            out.append(job)
        live = {(j.name, j.attempt) for j in jobs}
        for key in [k for k in self.confirmed if k not in live]:
            del self.confirmed[key]
        return out

    # -- the interface: sync, garbage-collect, status ---------------------------------------------------------------
    def sync(self, now: float | None = None) -> B.Decision:
        """One pass: what nodes wait for, the Jobs as they are, the decision; as the leader, the Events of what
        changed and the Jobs the decision creates."""
        now = time.time() if now is None else now
        wanted = self.wanted(now)
        every = [j for j in self.api.read() if j.tag]
        newest = B.latest(every)
        earlier = [j for j in every if newest[j.tag] is not j]  # kept with their logs, until stale
        jobs = self._confirm(list(newest.values()), wanted)
        self.jobs = {j.tag: j for j in jobs}
        decision = B.decide(wanted, [*jobs, *earlier], cap=self.options.cap, now=now, recipe=self.options.recipe,
                            backoff=self.options.backoff, max_backoff=self.options.max_backoff,
                            keep_failed=float(self.options.settings.ttl_seconds))
        self.last = decision
        if not self.is_leader():
            return decision
        for w in wanted:
            self.waiters.setdefault(w.tag, set()).update(w.nodes)
        self._report(jobs)
        self._tell_refused()
        ns = self.options.settings.namespace
        for w, attempt in decision.create:
            job = J.build_job(w.tag, attempt, w.nodes, self.options.settings, self.options.recipe,
                              replace_wrong=w.action == REPLACE, arch=w.arch, flavour=w.flavour)
            if not self.api.create(job, w.tag):
                continue
            log.info("build Job %s for %s (attempt %d), for %s", job["metadata"]["name"], w.tag, attempt,
                     ", ".join(w.nodes))
            self.on_started(w.tag)
            self.api.tell(w.nodes, w.tag, attempt, EVENT_CREATED,
                          f"building driver image {w.tag}: Job {ns}/{job['metadata']['name']} (attempt {attempt})",
                          warning=False)
            self.reported[w.tag] = (B.BuildPhase.RUNNING, attempt)
        return decision

    def garbage_collect(self) -> list[str]:
        """Delete the finished Jobs the last pass found past keeping (their pods and logs go with them), as the
        leader; the names deleted."""
        if not self.is_leader():
            return []
        for name in self.last.stale:
            self.api.delete(name)
        return list(self.last.stale)

    def step(self, now: float | None = None) -> B.Decision:
        decision = self.sync(now)
        self.garbage_collect()
        return decision

    def _report(self, jobs: Iterable[B.BuildJob]) -> None:
        """An Event on each node that waited (those the Job was made for, and those seen waiting since) when a Job
        this controller has not yet spoken of has finished."""
        for job in jobs:
            phase = "unlisted" if job.unlisted else "pruned" if job.pruned else job.phase
            if job.phase == B.BuildPhase.RUNNING or self.reported.get(job.tag) == (phase, job.attempt):
                continue
            first = job.tag not in self.reported
            self.reported[job.tag] = (phase, job.attempt)
            if job.phase == B.BuildPhase.BLOCKED:
                self.api.tell(sorted(self.waiters.get(job.tag, set()) | set(job.nodes)), job.tag, job.attempt,
                               EVENT_BLOCKED, f"driver image {job.tag} cannot be built: Job "
                               f"{self.options.settings.namespace}/{job.name} cannot create its pod: {job.reason}",
                               warning=True)
                log.error("build Job %s for %s cannot create its pod: %s", job.name, job.tag, job.reason)
                continue
            if job.pruned:
                self.api.tell(sorted(self.waiters.get(job.tag, set()) | set(job.nodes)), job.tag, job.attempt,
                               EVENT_PRUNED, f"driver image {job.tag}, built by Job "
                               f"{self.options.settings.namespace}/{job.name}, has left the ledger "
                               f"{self.ledger_name or self.options.settings.ledger} since: it is built again",
                               warning=True)
                continue
            if job.unlisted:
                self.api.tell(sorted(self.waiters.get(job.tag, set()) | set(job.nodes)), job.tag, job.attempt,
                               EVENT_UNLISTED, f"Job {self.options.settings.namespace}/{job.name} reported pushing "
                               f"{self.options.settings.ledger.removeprefix('registry://')}:{job.tag}, but the "
                               f"ledger {self.ledger_name or self.options.settings.ledger} does not list "
                               f"{job.tag}: retried after a backoff (attempt {job.attempt}); is the push target the "
                               "ledger this controller reads?", warning=True)
                log.warning("build Job %s succeeded, but the ledger does not list %s (attempt %d)", job.name,
                            job.tag, job.attempt)
                self.on_finished(job.tag, "unlisted", None)
                continue
            nodes = sorted(self.waiters.pop(job.tag, set()) | set(job.nodes))
            seconds = job.finished - job.started if job.finished is not None and job.started is not None else None
            if job.phase == B.BuildPhase.FAILED:
                kind = "will not be retried until something changes (gpualign build retry " + job.tag + ")" \
                    if job.failure == B.BuildFailure.PERMANENT else "retried after a backoff"
                self.api.tell(nodes, job.tag, job.attempt, EVENT_FAILED,
                               f"driver image {job.tag} failed to build ({kind}): {job.reason}", warning=True)
            else:
                self.api.tell(nodes, job.tag, job.attempt, EVENT_SUCCEEDED,
                               f"driver image {job.tag} built and pushed by Job {job.name}", warning=False)
            if not first:  # seen running by this process: its whole life is known
                self.on_finished(job.tag, job.phase, seconds)

    def _tell_refused(self) -> None:
        """An Event, once per node and tag, on each node whose missing image gpualign does not build: what to do."""
        for tag, (action, why, nodes) in self.refused.items():
            fresh = [n for n in nodes if (n, tag) not in self.refused_told]
            if not fresh:
                continue
            how = (f"render its recipe with `gpualign ensure {tag} --render DIR` and build it where the "
                   "distribution's archive is reachable" if action == Maker.RENDER else "make it by hand")
            self.api.tell(fresh, tag, 0, EVENT_NOT_BUILDABLE,
                           f"driver image {tag} is missing and gpualign does not build it ({why}): {how}, then push "
                           "it to the ledger; no build Job is made", warning=True)
            log.warning("driver image %s is missing and gpualign does not build it (%s): no build Job", tag, why)
            self.refused_told.update((n, tag) for n in fresh)
        live = {(n, t) for t, (_, _, nodes) in self.refused.items() for n in nodes}
        self.refused_told &= live

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except GpualignError as err:
                log.error("builds: %s", err.message)
            self.wake.wait(self.options.interval)
            self.wake.clear()

    def status(self) -> dict[str, Any]:
        """For the board and metrics: each tag's build as last read, and in one line as `status` says it."""
        now = time.time()
        ns = self.options.settings.namespace
        return {"running": list(self.last.running), "queued": list(self.last.queued),
                "held": dict(self.last.held), "backing_off": dict(self.last.backing_off),
                "blocked": list(self.last.blocked),
                "not_buildable": {t: {"action": a, "why": why, "nodes": list(n)}
                                  for t, (a, why, n) in self.refused.items()},
                "jobs": {t: {"name": j.name, "phase": "unlisted" if j.unlisted else j.phase, "attempt": j.attempt,
                             "reason": j.reason, "line": J.describe(j, ns, now)} for t, j in self.jobs.items()}}

