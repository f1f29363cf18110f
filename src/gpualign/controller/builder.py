"""The build trigger (`gpualign controller --build`): the images GPU nodes wait for, made by Kubernetes Jobs that
run gpualign's own `ensure`, with nobody typing.

Each pass reads the controller's findings (the same audit `check` runs: a missing tag and its action, `build` or
`mirror`), lists the build Jobs by label (so a restarted or newly elected leader adopts the ones that exist), reads
each failed Job's pod for its reason, asks controller/builds.py what to do, and does it: deletes the finished Job a
retry replaces, creates the new ones, and posts an Event on every waiting node when a build starts, fails or lands.
Only the leader writes. A Job's name is its tag's, so a second create of the same tag is a 409 and adopts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpualign.controller import build_job as J
from gpualign.controller import builds as B
from gpualign.errors import GpualignError
from gpualign.kube import Kube

log = logging.getLogger("gpualign.controller")
JSON = dict[str, Any]
BUILDABLE = ("build", "mirror")  # check's actions gpualign's ensure carries out
REPLACE = "replace"  # check's action for a present-but-wrong image: made again only when the value says so

EVENT_CREATED, EVENT_FAILED, EVENT_SUCCEEDED = "DriverImageBuildStarted", "DriverImageBuildFailed", \
    "DriverImageBuilt"


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
class Builder:
    kube: Kube
    options: BuildOptions
    findings: Callable[[], dict[str, JSON]]  # node -> its finding (the controller's cache)
    is_leader: Callable[[], bool] = lambda: True
    on_started: Callable[[str], None] = lambda _tag: None
    on_finished: Callable[[str, str, float | None], None] = lambda _tag, _result, _seconds: None
    waiting_since: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, tag) -> since, this process
    reported: dict[str, tuple[str, int]] = field(default_factory=dict)  # tag -> (phase, attempt) said in Events
    last: B.Decision = field(default_factory=B.Decision)
    jobs: dict[str, B.BuildJob] = field(default_factory=dict)  # tag -> its Job, as last read
    wake: threading.Event = field(default_factory=threading.Event)
    # node -> the finding for its next kernel (gpualign.io/kernel.next): built ahead, before the reboot
    ahead: Callable[[], dict[str, JSON]] = dict
    # tag -> every node that waited for it while its build ran (told when it lands, though by then the image is
    # present and they wait no more)
    waiters: dict[str, set[str]] = field(default_factory=dict)

    # -- what nodes wait for ---------------------------------------------------------------------------------------
    def wanted(self, now: float) -> list[B.Wanted]:
        """The tags nodes wait for now: their current kernel's, and their next kernel's (built ahead)."""
        by_tag: dict[str, set[str]] = {}
        actions: dict[str, str] = {}
        waiting: set[tuple[str, str]] = set()
        for source in (self.findings(), self.ahead()):
            for node, f in source.items():
                wrong = self.options.replace_wrong and f.get("status") == "wrong-image" and \
                    f.get("action") == REPLACE
                if (wrong or f.get("status") == "missing" and f.get("action") in BUILDABLE) and f.get("tag"):
                    by_tag.setdefault(f["tag"], set()).add(node)
                    actions[f["tag"]] = f["action"]
                    waiting.add((node, f["tag"]))
                    self.waiting_since.setdefault((node, f["tag"]), now)
        for key in [k for k in self.waiting_since if k not in waiting]:
            del self.waiting_since[key]
        return [B.Wanted(tag, actions[tag], tuple(sorted(nodes)), min(self.waiting_since[(n, tag)] for n in nodes))
                for tag, nodes in by_tag.items()]

    # -- one pass ------------------------------------------------------------------------------------------------
    def read_jobs(self) -> list[B.BuildJob]:
        ns = self.options.settings.namespace
        items = self.kube.list_raw(f"/apis/batch/v1/namespaces/{ns}/jobs", label_selector=f"{J.BUILD_LABEL}=true")
        failed = [j for j in items if J.is_failed(j)]
        pods: dict[str, JSON] = {}
        if failed:
            for pod in self.kube.pods(ns, label_selector=f"{J.BUILD_LABEL}=true"):
                owner = ((pod.get("metadata") or {}).get("labels") or {}).get("job-name")
                if owner:
                    pods[owner] = pod
        return [J.read_job(j, pods.get(j["metadata"]["name"])) for j in items]

    def step(self, now: float | None = None) -> B.Decision:
        now = time.time() if now is None else now
        wanted = self.wanted(now)
        jobs = self.read_jobs()
        self.jobs = {j.tag: j for j in jobs}
        decision = B.decide(wanted, jobs, cap=self.options.cap, now=now, recipe=self.options.recipe,
                            backoff=self.options.backoff, max_backoff=self.options.max_backoff,
                            keep_failed=float(self.options.settings.ttl_seconds))
        self.last = decision
        if not self.is_leader():
            return decision
        for w in wanted:
            self.waiters.setdefault(w.tag, set()).update(w.nodes)
        self._report(jobs)
        ns = self.options.settings.namespace
        for name in (*decision.replace, *decision.stale):
            self._delete(name)
        for w, attempt in decision.create:
            job = J.build_job(w.tag, attempt, w.nodes, self.options.settings, self.options.recipe,
                              replace_wrong=w.action == REPLACE)
            resp = self.kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
            if resp.status_code == 409:
                log.info("build Job %s for %s exists: adopted", job["metadata"]["name"], w.tag)
                continue
            if resp.status_code >= 400:
                log.error("creating build Job for %s: HTTP %d: %s", w.tag, resp.status_code, resp.text[:300])
                continue
            log.info("build Job %s for %s (attempt %d), for %s", job["metadata"]["name"], w.tag, attempt,
                     ", ".join(w.nodes))
            self.on_started(w.tag)
            self._event_on(w.nodes, w.tag, attempt, EVENT_CREATED,
                           f"building driver image {w.tag}: Job {ns}/{job['metadata']['name']} (attempt {attempt})",
                           warning=False)
            self.reported[w.tag] = (B.RUNNING, attempt)
        return decision

    def _delete(self, name: str, wait: float = 10.0) -> None:
        """Delete a finished Job (its pod goes with it) and wait until its name is free for the next attempt."""
        path = f"/apis/batch/v1/namespaces/{self.options.settings.namespace}/jobs/{name}"
        self.kube.request("DELETE", path, body={"kind": "DeleteOptions", "apiVersion": "v1",
                                                "propagationPolicy": "Background"})
        deadline = time.monotonic() + wait
        while self.kube.get(path) is not None and time.monotonic() < deadline:
            time.sleep(0.2)

    def _report(self, jobs: Iterable[B.BuildJob]) -> None:
        """An Event on each node that waited (those the Job was made for, and those seen waiting since) when a Job
        this controller has not yet spoken of has finished."""
        for job in jobs:
            if job.phase == B.RUNNING or self.reported.get(job.tag) == (job.phase, job.attempt):
                continue
            first = job.tag not in self.reported
            self.reported[job.tag] = (job.phase, job.attempt)
            nodes = sorted(self.waiters.pop(job.tag, set()) | set(job.nodes))
            seconds = job.finished - job.started if job.finished is not None and job.started is not None else None
            if job.phase == B.FAILED:
                kind = "will not be retried until something changes (gpualign build retry " + job.tag + ")" \
                    if job.failure == B.PERMANENT else "retried after a backoff"
                self._event_on(nodes, job.tag, job.attempt, EVENT_FAILED,
                               f"driver image {job.tag} failed to build ({kind}): {job.reason}", warning=True)
            else:
                self._event_on(nodes, job.tag, job.attempt, EVENT_SUCCEEDED,
                               f"driver image {job.tag} built and pushed by Job {job.name}", warning=False)
            if not first:  # seen running by this process: its whole life is known
                self.on_finished(job.tag, job.phase, seconds)

    def _event_on(self, nodes: Iterable[str], tag: str, attempt: int, reason: str, message: str, *,
                  warning: bool) -> None:
        suffix = f"{J.tag_hash(tag)[:10]}-{attempt}-{reason.lower()[-7:]}"
        for node in nodes:
            try:
                self.kube.event({"metadata": {"name": node}}, reason, message, warning=warning,
                                name=f"{node}.build-{suffix}")
            except GpualignError as err:
                log.warning("event on node %s: %s", node, err.message)

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except GpualignError as err:
                log.error("builds: %s", err.message)
            self.wake.wait(self.options.interval)
            self.wake.clear()

    def view(self) -> dict[str, Any]:
        """For the board and metrics: each tag's build as last read, and in one line as `status` says it."""
        now = time.time()
        ns = self.options.settings.namespace
        return {"running": list(self.last.running), "queued": list(self.last.queued),
                "held": dict(self.last.held), "backing_off": dict(self.last.backing_off),
                "jobs": {t: {"name": j.name, "phase": j.phase, "attempt": j.attempt, "reason": j.reason,
                             "line": J.describe(j, ns, now)} for t, j in self.jobs.items()}}

