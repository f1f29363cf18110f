"""The build trigger's API calls, in one place: the build Jobs and their pods read (and why a pod-less Job has no pod),
a Job created or deleted, an Event told on the nodes that wait. Also what `gpualign build` and `status` read and
write: every tag's build (`read_builds`, `read_cluster`), one tag's attempts, a build pod's log, a retry asked
for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpualign.base.errors import Forbidden, GpualignError
from gpualign.base.json_types import JSON
from gpualign.controller.build_trigger.decisions import BuildJob, latest
from gpualign.controller.build_trigger.job import (
    BLOCKED_ANNOTATION,
    BUILD_LABEL,
    DEFAULT_NAMESPACE,
    RETRY_ANNOTATION,
    TAG_HASH_LABEL,
    cannot_create_hint,
    describe,
    is_done,
    is_failed,
    read_job,
    tag_hash,
)
from gpualign.kube.client import Kube
from gpualign.kube.refusals import Response, refused
from gpualign.model.object_views import Job, Pod, view
from gpualign.upgrade.report import ANY_TAG

log = logging.getLogger("gpualign.controller")


@dataclass
class BuildJobs:
    """The build Jobs of one namespace, as the trigger reads and writes them."""

    kube: Kube
    namespace: str
    is_leader: Callable[[], bool] = lambda: True

    def read(self) -> list[BuildJob]:
        """Every build Job, each with its pod's word when it failed, and why its pod cannot be created when it has
        none."""
        ns = self.namespace
        items = self.kube.list_raw(f"/apis/batch/v1/namespaces/{ns}/jobs", label_selector=f"{BUILD_LABEL}=true")
        jobs = [view(j, Job) for j in items]
        podless = [j for j in jobs if not is_failed(j) and not is_done(j) and not j.status.active
                   and not j.status.ready]
        pods: dict[str, Pod] = {}
        if podless or any(is_failed(j) for j in jobs):
            for pod in map(lambda p: view(p, Pod), self.kube.pods(ns, label_selector=f"{BUILD_LABEL}=true")):
                if owner := pod.metadata.labels.get("job-name"):
                    pods[owner] = pod
        cannot = self._cannot_create([j for j in podless if j.metadata.name not in pods])
        return [read_job(j, pods.get(j.metadata.name), cannot.get(j.metadata.name)) for j in jobs]

    def _cannot_create(self, jobs: list[Job]) -> dict[str, str]:
        """Job name -> why its pod cannot be created (its FailedCreate Event, with what would allow it), for Jobs
        with no pod. The reason is kept on the Job too (Events expire), so its end after the deadline is known."""
        if not jobs:
            return {}
        ns = self.namespace
        names = {j.metadata.name for j in jobs}
        out: dict[str, str] = {}
        for ev in self.kube.list_raw(f"/api/v1/namespaces/{ns}/events",
                                     field_selector="involvedObject.kind=Job,reason=FailedCreate"):
            name = str((ev.get("involvedObject") or {}).get("name") or "")
            if name in names:
                out[name] = cannot_create_hint(" ".join(str(ev.get("message") or "").split())[:600], ns)
        for j in jobs:
            name = j.metadata.name
            kept = j.metadata.annotations.get(BLOCKED_ANNOTATION)
            if name in out and kept != out[name] and self.is_leader():
                try:
                    self.kube.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
                                    {"metadata": {"annotations": {BLOCKED_ANNOTATION: out[name]}}})
                except GpualignError as err:
                    log.warning("build Job %s: keeping why its pod cannot be created: %s", name, err.message)
        return out

    def create(self, job: JSON, tag: str) -> bool:
        """Create the Job; True when this call made it (a 409 adopts the one that exists: False)."""
        resp = self.kube.request("POST", f"/apis/batch/v1/namespaces/{self.namespace}/jobs", body=job)
        if resp.status_code == 409:
            log.info("build Job %s for %s exists: adopted", job["metadata"]["name"], tag)
            return False
        if resp.status_code >= 400:
            log.error("creating build Job for %s: HTTP %d: %s", tag, resp.status_code, resp.text[:300])
            return False
        return True

    def delete(self, name: str) -> None:
        """Delete a finished Job that is past keeping (its pod and log go with it)."""
        self.kube.request("DELETE", f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}",
                          body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})

    def tell(self, nodes: Iterable[str], tag: str, attempt: int, reason: str, message: str, *, warning: bool) -> None:
        """One Event on each node, named by the tag, attempt and reason: a retried tell is the same Event."""
        suffix = f"{tag_hash(tag)[:10]}-{attempt}-{reason.lower()[-7:]}"
        for node in nodes:
            if "/" in node:  # not a node: a pool Debian's archive announces for (controller/archive_watch.py)
                continue
            try:
                self.kube.event({"metadata": {"name": node}}, reason, message, warning=warning,
                                name=f"{node}.build-{suffix}")
            except GpualignError as err:
                log.warning("event on node %s: %s", node, err.message)


def read_cluster(kube: Any, namespace: str | None = None) -> dict[str, str]:
    """tag -> its build in one line, from the build Jobs the cluster has (every namespace unless one is named).
    When the Jobs cannot be listed, every tag's build is unknown: `{ANY_TAG: "build state unknown (…)"}`, so that
    status and why never tell a user to build by hand what the controller may be building."""
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs" if namespace else "/apis/batch/v1/jobs"
    try:
        jobs = kube.list_raw(path, label_selector=f"{BUILD_LABEL}=true")
    except Forbidden:
        if namespace is None:  # a role bound in the chart's default build namespace only (deploy/cli/builds.yaml)
            return read_cluster(kube, DEFAULT_NAMESPACE)
        return {ANY_TAG: f"build state unknown (no permission to list jobs in {namespace}: bind "
                         "deploy/cli/builds.yaml's role there)"}
    except GpualignError as err:
        return {ANY_TAG: f"build state unknown (the jobs could not be listed: {err.message})"}
    pods: dict[tuple[str, str], Pod] = {}
    if any(is_failed(j) for j in jobs):
        try:
            for pod in map(lambda p: view(p, Pod), kube.list_raw(
                    path.replace("/apis/batch/v1", "/api/v1").replace("/jobs", "/pods"),
                    label_selector=f"{BUILD_LABEL}=true")):
                if owner := pod.metadata.labels.get("job-name"):
                    pods[(pod.metadata.namespace, owner)] = pod
        except GpualignError:
            pass  # the reason is then the Job's own condition
    now = time.time()
    where: dict[str, str] = {}  # Job name -> its namespace
    reads = []
    for job in map(lambda j: view(j, Job), jobs):
        where[job.metadata.name] = ns = job.metadata.namespace or namespace or ""
        reads.append(read_job(job, pods.get((ns, job.metadata.name))))
    return {tag: describe(read, where[read.name], now) for tag, read in latest(reads).items()}




def read_builds(kube: Kube, namespace: str) -> list[BuildJob]:
    """Each tag's latest build Job in the namespace, with its pod's word."""
    jobs = kube.list_raw(f"/apis/batch/v1/namespaces/{namespace}/jobs", label_selector=f"{BUILD_LABEL}=true")
    pods = {pod.metadata.labels.get("job-name"): pod
            for pod in map(lambda p: view(p, Pod), kube.pods(namespace, label_selector=f"{BUILD_LABEL}=true"))}
    return list(latest(read_job(job, pods.get(job.metadata.name)) for job in map(lambda j: view(j, Job), jobs))
                .values())


def attempts(kube: Kube, namespace: str, tag: str) -> list[tuple[int, JSON]]:
    """The build Jobs of the tag in the namespace with their attempt, newest first (none: empty)."""
    jobs = [(read, j) for j in kube.list_raw(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                                             label_selector=f"{TAG_HASH_LABEL}={tag_hash(tag)}")
            if (read := read_job(j, None)).tag == tag]
    return sorted(((read.attempt, j) for read, j in jobs), key=lambda aj: aj[0], reverse=True)


def pods_of(kube: Kube, namespace: str, job: str) -> list[JSON]:
    """The Job's pods, oldest first."""
    return sorted(kube.pods(namespace, label_selector=f"job-name={job}"),
                  key=lambda p: view(p, Pod).metadata.creation_timestamp or "")


def build_log(kube: Kube, namespace: str, pod: str) -> Response:
    """The build container's log (the answer as it came: a 400 says why there is none yet)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    resp = kube.request("GET", path, params={"container": "build"}, accept="*/*")
    if resp.status_code > 400:
        raise refused("GET", path, kube.server, resp)
    return resp


def ask_retry(kube: Kube, namespace: str, job: str, stamp: str) -> None:
    """Stamp the Job with the time a retry was asked: the controller's next pass makes the next attempt."""
    kube.patch(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}", {"metadata": {"annotations": {
        RETRY_ANNOTATION: stamp}}})
