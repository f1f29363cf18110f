"""A node's driver pod as check sees it: image, tag and how it is doing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Waiting or ended states of a driver container that mean the node has no driver now, whatever the ledger holds.
FAILING = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                     "CreateContainerError", "CreateContainerConfigError", "RunContainerError", "Error", "Failed"})
# A pull that failed: the kubelet tries again after its back-off (10 s, doubling up to 5 minutes).
WAITING_FOR_IMAGE = frozenset({"ImagePullBackOff", "ErrImagePull"})
_CRASH_CHARS = 300  # a termination message may be 4 KiB; a status line keeps its start, where insmod names the cause


@dataclass(frozen=True)
class DriverPod:
    """The driver pod seen on a node: its image tag and how it is doing (Running, ImagePullBackOff, …)."""

    name: str
    image: str
    tag: str
    state: str
    ready: bool
    crash: str = ""  # a crash-looping container's last words (its last termination message): why it exits

    def as_dict(self) -> dict[str, str | bool]:
        """Its fields, in their order: dataclasses.asdict's deep copy would be 15 µs a pod, and a fleet's check
        reports one on nearly every node (its fields are all plain values)."""
        return dict(self.__dict__)

    @property
    def failing(self) -> bool:
        """The driver is not coming up: its container crash-loops, cannot be pulled or started, or the pod failed."""
        return self.state in FAILING

    def waits_for(self, image: str) -> bool:
        """It waits to pull exactly this image (after a failed pull)."""
        return self.state in WAITING_FOR_IMAGE and self.image == image

    def restart_hint(self) -> str:
        """What a pod waiting for an image that is there now needs: a restart, or the kubelet's next retry."""
        namespace, _, name = self.name.partition("/")
        return ("the image is there now: the kubelet pulls it at its next retry (up to 5 minutes after the last), "
                f"or at once if the pod is restarted (kubectl delete pod -n {namespace} {name}; the controller "
                "does it with --restart-waiting-driver-pods)")

    def trouble(self) -> str:
        """'driver pod NS/NAME is STATE: image IMAGE', plus, when it crash-loops, what it said when it exited."""
        said = f"; it exited saying: {self.crash}" if self.crash and self.state == "CrashLoopBackOff" else ""
        return f"driver pod {self.name} is {self.state}: image {self.image}{said}"

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> DriverPod:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        containers = spec.get("containers") or [{}]
        waits = []
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                terminated = (cs.get("lastState") or {}).get("terminated") or {}
                waits.append((str(waiting["reason"]), str(terminated.get("message") or "")))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return cls.of(meta.get("namespace"), meta.get("name"), str(containers[0].get("image", "")),
                      status.get("phase"), waits, ready)

    @classmethod
    def of(cls, namespace: str | None, name: str | None, image: str, phase: str | None,
           waits: Iterable[tuple[str, str]], ready: bool) -> DriverPod:
        """From a pod's parts (read from its dict, or decoded by gpualign.kube.pod_meta): waits, each container
        waiting for a reason, and what it said when it last ended (its termination message)."""
        last = image.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        state, crash = str(phase or "Unknown"), ""
        for reason, message in waits:
            state = reason
            crash = crash or " ".join(message.split())[:_CRASH_CHARS]
        return cls(f"{namespace}/{name}", image, tag, state, ready, crash)
