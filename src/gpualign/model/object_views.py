"""The fields of Pods, Jobs, DaemonSets and PodDisruptionBudgets that gpualign reads, as msgspec Structs: an object
from the API server (a dict) is converted once, every field it lacks takes its default, and every field gpualign
does not read is skipped. Readers then ask `pod.status.phase`, not `(pod.get("status") or {}).get("phase")`.

Names are the API's, in snake case (msgspec maps them to its camelCase). A field of the wrong type (a malformed
object) raises ValidationError where the object is converted, naming the field. Pure: no I/O.
"""

from typing import Any, TypeVar

import msgspec

# No `from __future__ import annotations`: msgspec reads these annotations at class creation.


class _View(msgspec.Struct, rename="camel", frozen=True):
    pass


class OwnerReference(_View, frozen=True):
    kind: str = ""
    controller: bool | None = None


class ObjectMeta(_View, frozen=True):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: list[OwnerReference] = []
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None

    @property
    def ref(self) -> str:
        """NAMESPACE/NAME, as kubectl names a namespaced object."""
        return f"{self.namespace}/{self.name}"


class Condition(_View, frozen=True):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class Waiting(_View, frozen=True):
    reason: str = ""


class Terminated(_View, frozen=True):
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


class ContainerState(_View, frozen=True):
    waiting: Waiting | None = None
    terminated: Terminated | None = None


class ContainerStatus(_View, frozen=True):
    state: ContainerState = ContainerState()
    last_state: ContainerState = ContainerState()


class Container(_View, frozen=True):
    image: str = ""


class Volume(_View, frozen=True):
    empty_dir: dict[str, Any] | None = None  # present (even empty): the volume is an emptyDir


class PodSpec(_View, frozen=True):
    node_selector: dict[str, str] = {}
    containers: list[Container] = []
    volumes: list[Volume] = []


class PodStatus(_View, frozen=True):
    phase: str = ""
    conditions: list[Condition] = []
    container_statuses: list[ContainerStatus] = []


class Pod(_View, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()

    @property
    def ready(self) -> bool:
        """Its Ready condition holds."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)

    @property
    def image(self) -> str:
        """Its first container's image."""
        return self.spec.containers[0].image if self.spec.containers else ""


class PodVolumes(_View, frozen=True):
    volumes: list[Volume] = []


class PodPhase(_View, frozen=True):
    phase: str = ""


class MovablePod(_View, frozen=True):
    """What the walk reads of a pod to decide whether it is moved off a node, and whether kubectl drain's rules let
    it be: its metadata, its volumes and its phase (the lighter view: a walk reads every pod of its nodes)."""

    metadata: ObjectMeta = ObjectMeta()
    spec: PodVolumes = PodVolumes()
    status: PodPhase = PodPhase()


class PodTemplate(_View, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()


class DaemonSetSpec(_View, frozen=True):
    template: PodTemplate = PodTemplate()


class DaemonSet(_View, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: DaemonSetSpec = DaemonSetSpec()


class JobStatus(_View, frozen=True):
    active: int = 0
    ready: int | None = None
    start_time: str | None = None
    completion_time: str | None = None
    conditions: list[Condition] = []


class Job(_View, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    status: JobStatus = JobStatus()

    def holds(self, *types: str) -> Condition | None:
        """Its first condition of one of these types that holds (status True), in the order the types are given."""
        held = {c.type: c for c in self.status.conditions if c.status == "True"}
        return next((held[t] for t in types if t in held), None)


class LabelSelectorRequirement(_View, frozen=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(_View, frozen=True):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class BudgetSpec(_View, frozen=True):
    selector: LabelSelector | None = None


class BudgetStatus(_View, frozen=True):
    current_healthy: int | None = None
    desired_healthy: int | None = None
    disruptions_allowed: int | None = None
    disrupted_pods: dict[str, str] = {}


class PodDisruptionBudget(_View, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: BudgetSpec = BudgetSpec()
    status: BudgetStatus = BudgetStatus()


T = TypeVar("T")


def view(obj: object, kind: type[T]) -> T:
    """The object (a dict from the API server, or a view already) as `kind`."""
    if isinstance(obj, kind):
        return obj
    return msgspec.convert(obj, kind, strict=False)
