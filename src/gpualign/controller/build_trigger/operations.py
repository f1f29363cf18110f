"""What a person runs on the build Jobs the controller's trigger made (`gpualign build list | logs | retry`): read
them, read an attempt's log, ask for another attempt, over the cluster's API. The commands render what these
return."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from gpualign.base.errors import BadInput, Refused
from gpualign.controller.build_trigger.decisions import BuildJob
from gpualign.controller.build_trigger.job import read_job
from gpualign.controller.build_trigger.jobs_api import ask_retry, attempts, build_log, pods_of, read_builds
from gpualign.kube.client import Kube
from gpualign.model.object_views import Pod, view


class NoSuchAttempt(BadInput):
    """An attempt the tag's Jobs do not hold (`kept`: the attempts they do)."""

    def __init__(self, tag: str, namespace: str, kept: list[int]) -> None:
        super().__init__(f"{tag} has no such attempt in {namespace} (kept: {', '.join(map(str, sorted(kept)))})")
        self.kept = kept


def listed(kubeconfig: str | None, context: str | None, namespace: str) -> tuple[list[BuildJob], dict[str, Any]]:
    """Every tag's build, a row a tag, sorted by tag; and the cluster read (kube.describe())."""
    with Kube(kubeconfig, context) as kube:
        read = read_builds(kube, namespace)
        return sorted(read, key=lambda b: b.tag), kube.describe()


def _attempts(kube: Kube, namespace: str, tag: str) -> list[tuple[int, dict[str, Any]]]:
    """The build Jobs of TAG in the namespace with their attempt, newest first; a one-line error when there is
    none."""
    jobs = attempts(kube, namespace, tag)
    if not jobs:
        raise BadInput(f"no build Job for {tag} in {namespace}: the controller makes one when a node waits for the "
                       "image (gpualign build list shows the tags it built)")
    return jobs


def attempt_log(kubeconfig: str | None, context: str | None, namespace: str, tag: str, attempt: int | None,
                note: Callable[[str], None]) -> str:
    """The log of TAG's latest attempt (or `attempt`), as its pod wrote it; `note` is told which Job and attempt it
    is before the log is read. Refused when the pod has none yet."""
    with Kube(kubeconfig, context) as kube:
        jobs = dict(_attempts(kube, namespace, tag))
        if attempt is not None and attempt not in jobs:
            raise NoSuchAttempt(tag, namespace, list(jobs))
        job = jobs[attempt if attempt is not None else max(jobs)]
        name = job["metadata"]["name"]
        pods = pods_of(kube, namespace, name)
        read = read_job(job, pods[-1] if pods else None)
        note(f"# {namespace}/{name}: {tag}, attempt {read.attempt}, {read.phase}"
             + (f": {read.reason}" if read.reason else ""))
        if not pods:
            raise Refused(f"Job {namespace}/{name} has no pod, so no log"
                          + (f": {read.reason}" if read.reason else " (it may still be waiting to be placed)"))
        last = view(pods[-1], Pod)
        pod = last.metadata.name
        if last.status.phase == "Pending":  # its container has not run: the API answers with an empty log
            why = next((c.message or c.reason for c in last.status.conditions
                        if c.status == "False" and (c.message or c.reason)), "")
            raise Refused(f"pod {namespace}/{pod} has no log yet: it is Pending" + (f" ({why})" if why else ""))
        resp = build_log(kube, namespace, pod)
        if resp.status_code == 400:  # the container has not started: the API says why
            raise Refused(f"pod {namespace}/{pod} has no log yet: {resp.text.strip()[:300]}")
        return resp.text


def ask_again(kubeconfig: str | None, context: str | None, namespace: str, tag: str) -> tuple[str, str]:
    """Stamp TAG's latest Job with the time asked, so that the controller's next pass makes the next attempt: the
    Job's name and the stamp."""
    with Kube(kubeconfig, context, field_manager="gpualign-build-retry") as kube:
        name = _attempts(kube, namespace, tag)[0][1]["metadata"]["name"]
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ask_retry(kube, namespace, name, stamp)
        return name, stamp
