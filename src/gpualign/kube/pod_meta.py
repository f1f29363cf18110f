"""The parts of a driver pod LIST that check reads, decoded by msgspec, which skips every other field without
building it: a driver pod's managedFields, volumes, environment and status are most of its 5–10 KiB, and a fleet
has one on every GPU node. Imported only by the read that uses it. (No `from __future__ import annotations`: msgspec
reads these annotations as types.)"""

import msgspec

from gpualign.model.driver_pod_status import DriverPod


class Meta(msgspec.Struct):
    name: str | None = None
    namespace: str | None = None
    deletionTimestamp: str | None = None  # noqa: N815 - the API's field name


class Container(msgspec.Struct):
    image: str = ""


class Spec(msgspec.Struct):
    nodeName: str | None = None  # noqa: N815 - the API's field name
    containers: list[Container] | None = None


class Waiting(msgspec.Struct):
    reason: str | None = None


class State(msgspec.Struct):
    waiting: Waiting | None = None


class Terminated(msgspec.Struct):
    message: str | None = None


class LastState(msgspec.Struct):
    terminated: Terminated | None = None


class ContainerStatus(msgspec.Struct):
    state: State | None = None
    lastState: LastState | None = None  # noqa: N815 - the API's field name


class Condition(msgspec.Struct):
    type: str | None = None
    status: str | None = None


class Status(msgspec.Struct):
    phase: str | None = None
    conditions: list[Condition] | None = None
    containerStatuses: list[ContainerStatus] | None = None  # noqa: N815 - the API's field name


class Pod(msgspec.Struct):
    metadata: Meta | None = None
    spec: Spec | None = None
    status: Status | None = None


class Page(msgspec.Struct):
    items: list[Pod] | None = None


decoder = msgspec.json.Decoder(Page)


def driver_pods(body: bytes) -> list[tuple[str, DriverPod]]:
    """A pod LIST page's body → (node name, driver pod) for each pod bound to a node and not going away, as
    DriverPod.from_pod reads the same pod's dict. Raises msgspec.ValidationError on a page of another shape (the
    caller reads that one as dicts)."""
    out: list[tuple[str, DriverPod]] = []
    for pod in decoder.decode(body).items or ():
        meta, spec, status = pod.metadata or Meta(), pod.spec or Spec(), pod.status or Status()
        if not spec.nodeName or meta.deletionTimestamp:
            continue
        waits = []
        for cs in status.containerStatuses or ():
            if cs.state and cs.state.waiting and cs.state.waiting.reason:
                ended = cs.lastState.terminated if cs.lastState else None
                waits.append((cs.state.waiting.reason, (ended.message or "") if ended else ""))
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
        image = spec.containers[0].image if spec.containers else ""
        out.append((spec.nodeName, DriverPod.of(meta.namespace, meta.name, image, status.phase, waits, ready)))
    return out
