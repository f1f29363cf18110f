"""A driver pod waiting to pull an image the ledger now has is deleted once, read again first and with preconditions;
any other pod is left alone, and a refusal is said once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpualign.controller import pull_restart
from gpualign.controller.pull_restart import PullRestarter
from gpualign.model.audit import Finding, Status
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.facts import node_facts
from tests.support import builders
from tests.support.findings import finding as made

IMAGE = "registry.example/nvidia/driver:535-6.1.0-50-amd64-debian12"
POD = "gpu-operator/nvidia-driver-daemonset-abcde"


def finding(status: Status = Status.PRESENT, state: str = "ImagePullBackOff", image: str = IMAGE,
            pod: bool = True, found: str = IMAGE) -> Finding:
    """found: the node's image, as the audit found it; image: the one its driver pod waits for."""
    driver_pod = DriverPod(POD, image, image.rsplit(":", 1)[1], state, False) if pod else None
    return made(found.rsplit(":", 1)[1], status, image=found, driver_pod=driver_pod)


def pod(reason: str = "ImagePullBackOff", image: str = IMAGE, started: bool = False, uid: str = "u1") -> dict:
    return {"metadata": {"name": POD.split("/")[1], "namespace": "gpu-operator", "uid": uid,
                         "resourceVersion": "42"},
            "spec": {"containers": [{"name": "nvidia-driver-ctr", "image": image}]},
            "status": {"containerStatuses": [{"name": "nvidia-driver-ctr", "started": started,
                                              "state": {"waiting": {"reason": reason}}}]}}


@dataclass
class Answer:
    status_code: int


class ApiServer:
    """Answers GET and DELETE of one pod as the API server would, and records the DELETEs' bodies."""

    def __init__(self, current: dict | None, delete_status: int = 200) -> None:
        self.current, self.delete_status = current, delete_status
        self.deletes: list[dict] = []
        self.events: list[str] = []

    def get(self, path: str) -> dict | None:
        if path.startswith("/api/v1/nodes/"):
            return builders.node("gpu-1", kernel="6.1.0-50-amd64")
        return self.current

    def request(self, method: str, path: str, body: Any = None) -> Answer:
        assert method == "DELETE" and path == f"/api/v1/namespaces/{POD.replace('/', '/pods/')}"
        self.deletes.append(body)
        return Answer(self.delete_status)

    def event(self, node: dict, reason: str, message: str, **_: Any) -> None:
        self.events.append(reason)


FACTS = node_facts(builders.node("gpu-1", kernel="6.1.0-50-amd64"))


def test_only_a_pod_waiting_for_the_image_now_present_is_chosen():
    assert pull_restart.waits_for_present_image(finding()) == POD
    assert pull_restart.waits_for_present_image(finding(state="ErrImagePull")) == POD
    assert pull_restart.waits_for_present_image(finding(status=Status.MISSING)) is None  # still missing
    assert pull_restart.waits_for_present_image(finding(state="CrashLoopBackOff")) is None  # pulled; it crashes
    assert pull_restart.waits_for_present_image(finding(state="Running")) is None
    assert pull_restart.waits_for_present_image(finding(image=IMAGE + "-other")) is None  # waits for another image
    assert pull_restart.waits_for_present_image(finding(pod=False)) is None


def test_the_waiting_pod_is_deleted_once_with_preconditions_and_an_event():
    api = ApiServer(pod())
    restarter = PullRestarter(api)  # type: ignore[arg-type]
    assert restarter.apply(FACTS, finding()) is True
    assert api.deletes == [{"kind": "DeleteOptions", "apiVersion": "v1",
                            "preconditions": {"uid": "u1", "resourceVersion": "42"}}]
    assert api.events == [pull_restart.REASON]
    assert restarter.apply(FACTS, finding()) is False  # the same pod (its watch may lag): never twice
    api.current = pod(uid="u2")  # its DaemonSet's new pod cannot pull it either (credentials, say): no loop
    assert restarter.apply(FACTS, finding()) is False
    assert len(api.deletes) == 1
    other = IMAGE.replace("6.1.0-50", "6.1.0-51")  # the node's next kernel, its image waited for and pushed
    api.current = pod(uid="u3", image=other)
    assert restarter.apply(FACTS, finding(image=other, found=other)) is True
    restarter.forget(FACTS.name)  # the node is gone: a node of that name later starts afresh
    api.current = pod(uid="u4")
    assert restarter.apply(FACTS, finding()) is True


def test_an_image_that_left_the_ledger_and_came_back_allows_one_more_restart():
    """A ledger read a moment stale said present for an image just deleted: the waiting pod was restarted for
    nothing. Once the ledger says missing and the image is built and pushed, the pod waiting for it is restarted
    again (once)."""
    api = ApiServer(pod())
    restarter = PullRestarter(api)  # type: ignore[arg-type]
    assert restarter.apply(FACTS, finding()) is True
    api.current = pod(uid="u2")
    assert restarter.apply(FACTS, finding(status=Status.MISSING)) is False
    assert restarter.apply(FACTS, finding()) is True  # pushed again
    api.current = pod(uid="u3")
    assert restarter.apply(FACTS, finding()) is False and len(api.deletes) == 2


def test_a_pod_that_changed_since_the_cache_saw_it_is_left_alone():
    for current in (pod(reason="ContainerCreating"), pod(started=True), pod(image=IMAGE + "-other"),
                    {**pod(), "metadata": {**pod()["metadata"], "deletionTimestamp": "2026-12-03T00:00:00Z"}}, None):
        api = ApiServer(current)
        assert PullRestarter(api).apply(FACTS, finding()) is False  # type: ignore[arg-type]
        assert api.deletes == []


def test_a_refusal_is_said_once_and_nothing_more_is_tried(caplog):
    api = ApiServer(pod(), delete_status=403)
    restarter = PullRestarter(api)  # type: ignore[arg-type]
    assert restarter.apply(FACTS, finding()) is False
    api.current = pod(uid="u2")
    assert restarter.apply(FACTS, finding()) is False
    assert len(api.deletes) == 1 and api.events == []
    assert sum("not allowed" in r.getMessage() for r in caplog.records) == 1


def test_a_pod_changed_between_the_read_and_the_delete_is_not_restarted_but_a_later_one_may_be():
    api = ApiServer(pod(), delete_status=409)  # the preconditions failed: it changed meanwhile
    restarter = PullRestarter(api)  # type: ignore[arg-type]
    assert restarter.apply(FACTS, finding()) is False
    assert api.events == []
    api.current, api.delete_status = pod(uid="u2"), 200  # its replacement, still waiting
    assert restarter.apply(FACTS, finding()) is True
