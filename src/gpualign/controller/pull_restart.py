"""A driver pod that waited for its image is restarted the moment the ledger has the image.

A kubelet retries a failed image pull after a back-off that starts at 10 s and doubles up to 5 minutes
(`MaxImageBackOff`, pkg/kubelet/kubelet.go). A node whose image was built while its driver pod waited would so wait
up to 5 more minutes after the push before its GPUs come back. When the node's finding says the image is present and
its driver pod still waits to pull that very image (ImagePullBackOff or ErrImagePull), the controller deletes the
pod, as a person would: its DaemonSet makes it again at once, and the new pod pulls now.

Only such a pod is deleted: read again first, and deleted with preconditions on its uid and resourceVersion, so a
pod that has changed since (pulled, running, replaced) is left alone. A pod that never started holds nothing on the
node. A node's pod is restarted once per image: if the new pod cannot pull it either (the node lacks the registry's
credentials, say), the kubelet's back-off runs and the node's finding shows the failing pod; nothing loops. An
image that leaves the ledger and is pushed again (rebuilt) is a new image for this: its pod may be restarted once
more (a ledger read a moment stale once took the node's one restart before the image was built). A
refusal (no RBAC right to delete pods) is said once and the kubelet's back-off left to run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpualign.base.errors import GpualignError
from gpualign.kube.client import Kube
from gpualign.model.audit import Finding, Status
from gpualign.model.driver_pod_status import WAITING_FOR_IMAGE, DriverPod
from gpualign.model.facts import NodeFacts

log = logging.getLogger("gpualign.controller")
REASON = "DriverPodRestarted"


def waits_for_present_image(finding: Finding) -> str | None:
    """The driver pod (NS/NAME) to restart: the finding says the node's image is in the ledger, and its driver pod
    waits to pull that same image. None otherwise."""
    pod = finding.driver_pod
    if finding.status != Status.PRESENT or pod is None or not finding.image:
        return None
    if pod.state not in WAITING_FOR_IMAGE or pod.image != finding.image:
        return None
    return pod.name


def still_waiting(pod: Mapping[str, Any], image: str) -> bool:
    """The pod as the API server has it now: not being deleted, none of its containers ever started, and waiting to
    pull `image`."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    never_started = bool(statuses) and not any(s.get("started") for s in statuses) and all(
        ((s.get("state") or {}).get("waiting") or {}).get("reason") in WAITING_FOR_IMAGE for s in statuses)
    return never_started and DriverPod.from_pod(pod).waits_for(image)


@dataclass
class PullRestarter:
    kube: Kube
    restarted: dict[str, str] = field(default_factory=dict)  # node -> the image its driver pod was restarted for
    refused: bool = False  # the right to delete pods is missing: said once
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, facts: NodeFacts, finding: Finding) -> bool:
        """Restart the node's driver pod if it waits for an image the ledger has; True when it was deleted."""
        if finding.status == Status.MISSING:  # gone from the ledger: once it is pushed again, one more restart
            with self.lock:
                self.restarted.pop(facts.name, None)
            return False
        name = waits_for_present_image(finding)
        if name is None or self.refused:
            return False
        image = str(finding.image)
        with self.lock:
            if self.restarted.get(facts.name) == image:
                return False  # once per node and image: a pod that cannot pull it after a restart is not looped on
        namespace, _, pod_name = name.partition("/")
        path = f"/api/v1/namespaces/{namespace}/pods/{pod_name}"
        try:
            pod = self.kube.get(path)
            if pod is None or not still_waiting(pod, image):
                return False
            uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
            with self.lock:
                if self.restarted.get(facts.name) == image:
                    return False  # another worker's check of the node did it meanwhile
                self.restarted[facts.name] = image
            body = {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"uid": uid, "resourceVersion": version}}
            resp = self.kube.request("DELETE", path, body=body)
            if resp.status_code in (404, 409):
                with self.lock:
                    self.restarted.pop(facts.name, None)  # not deleted: a later pod still waiting may be
                return False  # gone, or changed since it was read: nothing to do
            if resp.status_code == 403:
                with self.lock:
                    self.refused = True
                log.warning("cannot delete driver pod %s (not allowed): it pulls %s when the kubelet's back-off "
                            "ends, up to 5 minutes from now; the chart's restartWaitingDriverPods grants the right",
                            name, image)
                return False
            if resp.status_code >= 400:
                log.warning("deleting driver pod %s: HTTP %s", name, resp.status_code)
                with self.lock:
                    self.restarted.pop(facts.name, None)  # tried again at the node's next check
                return False
            log.info("node %s: driver pod %s restarted: %s is in the ledger", facts.name, name, image)
            node = self.kube.get(f"/api/v1/nodes/{facts.name}")
            if node is not None:
                self.kube.event(node, REASON, f"driver pod {name} waited to pull {image}, which the ledger now has: "
                                "deleted so that its DaemonSet makes it again and it pulls now, not after the "
                                "kubelet's back-off (up to 5 minutes)", warning=False)
            return True
        except GpualignError as err:
            log.warning("node %s: restarting driver pod %s: %s", facts.name, name, err.message)
            return False

    def forget(self, node: str) -> None:
        """The node is gone."""
        with self.lock:
            self.restarted.pop(node, None)
