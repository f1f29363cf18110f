"""check reads driver pod pages through msgspec (gpualign.kube.pod_meta), building only what a DriverPod reads: each
pod must come out exactly as DriverPod.from_pod reads its whole dict, pods not bound or going away are left out, and
a page of another shape is read as dicts."""

from __future__ import annotations

import msgspec
import orjson
from hypothesis import given
from hypothesis import strategies as st

from gpualign.kube.inventory import _driver_pods
from gpualign.kube.pod_meta import driver_pods
from gpualign.model.driver_pod_status import DriverPod

maybe_text = st.one_of(st.none(), st.text(max_size=8), st.sampled_from(["Running", "Pending", "CrashLoopBackOff",
                                                                        "ImagePullBackOff", "True", "Ready"]))


def optional(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """A field present with a value, present as null, or absent."""
    return st.one_of(st.just("absent"), st.none(), strategy)


def obj(**fields: object) -> dict:
    return {k: v for k, v in fields.items() if v != "absent"}


container_status = st.builds(
    lambda waiting, message, running: obj(
        name="nvidia-driver-ctr", ready=False, restartCount=3,
        state=obj(waiting=waiting, running=running),
        lastState=obj(terminated=obj(exitCode=1, message=message))),
    optional(st.builds(lambda reason: obj(reason=reason, message="back-off 5m0s"), optional(maybe_text))),
    optional(st.text(" \tinsmod: ERROR could not insert 'nvidia'\n", max_size=400)),
    optional(st.just({"startedAt": "2026-12-01T00:00:00Z"})))

pod = st.builds(
    lambda name, namespace, deleting, node, image, phase, conditions, statuses: obj(
        apiVersion="v1", kind="Pod",
        metadata=obj(name=name, namespace=namespace, deletionTimestamp=deleting,
                     labels={"app.kubernetes.io/component": "nvidia-driver"},
                     managedFields=[{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]),
        spec=obj(nodeName=node, containers=image if image in (None, "absent") else [obj(name="c", image=image)],
                 volumes=[{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia"}}]),
        status=obj(phase=phase, conditions=conditions, containerStatuses=statuses, hostIP="10.0.0.1")),
    optional(st.text(min_size=1, max_size=8)), optional(st.just("gpu-operator")),
    st.sampled_from(["absent", None, "2026-12-01T00:00:00Z"]), optional(st.sampled_from(["gpu-1", "gpu-2", ""])),
    optional(st.sampled_from(["reg.example/nvidia/driver:580-6.1.0-28-amd64-debian12", "driver", "a:b/c", ""])),
    optional(maybe_text),
    optional(st.lists(st.builds(lambda t, s: obj(type=t, status=s), optional(maybe_text), optional(maybe_text)),
                      max_size=3)),
    optional(st.lists(container_status, max_size=3)))


def by_dicts(items: list[dict]) -> list[tuple[str, DriverPod]]:
    """What the driver pods' read kept before: each bound pod not going away, read whole by DriverPod.from_pod."""
    return [(node, DriverPod.from_pod(p)) for p in items
            if (node := (p.get("spec") or {}).get("nodeName")) and not (p.get("metadata") or {}).get(
                "deletionTimestamp")]


@given(st.lists(pod, max_size=6))
def test_each_driver_pod_is_what_its_whole_dict_says(items):
    body = orjson.dumps({"kind": "PodList", "metadata": {"continue": ""}, "items": items})
    assert driver_pods(body) == by_dicts(items)
    assert _driver_pods(body) == by_dicts(items)


def test_a_page_of_another_shape_is_read_as_dicts():
    items = [{"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "gpu-1", "containers": [
        {"image": "reg/nvidia/driver:580-k-debian12"}]}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": True}]}}]  # a boolean where the API gives a string
    body = orjson.dumps({"items": items})
    try:
        driver_pods(body)
        raise AssertionError("decoded a page of another shape")
    except msgspec.ValidationError:
        pass
    assert _driver_pods(body) == by_dicts(items) == [("gpu-1", DriverPod(
        "ns/p", "reg/nvidia/driver:580-k-debian12", "580-k-debian12", "Running", False, ""))]
