"""SIMULATION (lab only): plays the kubelet and the driver container for driver pods.

kwok leaves driver pods (app.kubernetes.io/component=nvidia-driver) alone; this process decides for them, as a
real node would:
- the pod's image tag exists in the lab registry: the pod becomes Running/Ready, and the node's GFD driver labels
  change to the DRIVER_VERSION in that image's config ("the new driver is loaded");
- it does not: the container waits in ImagePullBackOff, and the pull is retried every 2 s; or, with
  `--pull-backoff kubelet` (GPUALIGN_LAB_PULL_BACKOFF=kubelet in `lab up`'s environment), as a kubelet retries it:
  after 10 s, doubling up to 5 minutes (pkg/kubelet's imageBackOffPeriod and MaxImageBackOff), anew for a new pod.
- the node's kernel has headers in Debian's archive (Debian 12's 6.1.0-N-amd64 and flavours) and the image holds
  kernel modules: the modules are checked as that kernel would at insmod (version magic, every symbol CRC against
  its Module.symvers; lab/kernel_load.py), then loaded into that Debian kernel itself, booted in a VM
  (lab/kernel_vm.py; the pod is Running, not Ready, meanwhile); refused, the pod crash-loops with the kernel's
  message in its status and a BackOff Event. A node annotated lab.gpualign.io/secure-boot-certs (Secure Boot,
  with the certificates its kernel holds) also has each module's signature checked first ("Key was rejected by
  service"), and its kernel booted under Secure Boot trusting them. An image without
  modules (the lab's synthetic ones), or a node whose kernel has no headers here
  (Ubuntu, RHEL), is tag-only: pulling the tag is loading it.
- before the kernel's checks, as gpualign's `nvidia-driver init` does: an image labelled with its flavour of modules
  (GPUALIGN_KERNEL_MODULE_TYPE) crash-loops a pod that asks for the other (KERNEL_MODULE_TYPE, as the GPU Operator
  sets it from kernelModuleType), with the script's own words.
A pod annotated driver-sim.gpualign.io/load-delay (seconds, or a Go-style "2s"/"500ms") stays Pending that long
before the driver counts as loaded, to model the minutes a real driver container takes to load its module.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpualign.base import labels as L
from gpualign.base.errors import GpualignError
from gpualign.judging.inspect import checkable
from gpualign.kube.client import Kube
from gpualign.lab import dra, kernel_load, kernel_vm, realnode
from gpualign.lab.scenarios import NodeSpec
from gpualign.lab.seed import driver_labels
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient, config_env
from gpualign.model.flavours import init_refusal
from gpualign.model.image_ref import ImageRef
from gpualign.model.kernels import Kernel

SELECTOR = f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"
RETRY_SECONDS = 2.0
KUBELET_PULL_BACKOFF = (10.0, 300.0)  # a kubelet's image pull back-off: 10 s, doubling, capped at 5 minutes
CRASH_BACKOFF = (10.0, 300.0)  # a kubelet's restart back-off: 10 s, doubling, capped at 5 minutes


def backoff(failures: int, schedule: tuple[float, float]) -> float:
    """Seconds a kubelet waits after `failures` failures in a row: the schedule's first wait, doubled at each
    failure, capped."""
    first, cap = schedule
    return float(min(cap, first * 2.0 ** max(0, failures - 1)))


def crash_backoff(restarts: int) -> float:
    """Seconds before the next restart of a container that has crashed `restarts` times, as a kubelet waits."""
    return backoff(restarts, CRASH_BACKOFF)
LOAD_DELAY = "driver-sim.gpualign.io/load-delay"
log = logging.getLogger("driver-sim")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_delay(pod: dict[str, Any]) -> float:
    """The pod's simulated driver load time in seconds (0 when absent or unreadable)."""
    text = str(((pod.get("metadata") or {}).get("annotations") or {}).get(LOAD_DELAY, "")).strip()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("s"):
        text = text[:-1]
    try:
        return max(0.0, float(text) * scale)
    except ValueError:
        return 0.0


def split_image(image: str) -> tuple[str, str, str]:
    """host/repo:tag → (host, repo, tag). An image without a registry host is 'docker.io'."""
    ref = ImageRef.parse(image)
    name, tag = ref.name, ref.tag or "latest"
    host, _, repo = name.partition("/")
    if "." not in host and ":" not in host and host != "localhost":
        host, repo = "docker.io", name
    return host, repo, tag


class Simulator:
    def __init__(self, kube: Kube, registry: str, pull_backoff: str = "fast") -> None:
        self.kube = kube
        self.registry = registry
        self.pull_backoff = pull_backoff  # "fast": every RETRY_SECONDS; "kubelet": KUBELET_PULL_BACKOFF
        self.decided: dict[str, tuple[Any, ...]] = {}  # pod uid+image -> (outcome, when[, restarts])
        self.loading: dict[str, float] = {}  # pod uid+image -> when its simulated driver load began
        self.archs: dict[str, str] = {}  # node -> its kubernetes.io/arch
        self.vm = kernel_vm.KernelVM()  # real modules: the node's own kernel decides, booted in a VM
        self.booting: set[str] = set()  # pod uid+image whose kernel is being booted

    def wait_after(self, outcome: tuple[Any, ...]) -> float:
        """Seconds before a pod is tried again after its last outcome (kind, when, failures): a crash-looping
        container's restart back-off; a failed pull's, as a kubelet's (kubelet) or every RETRY_SECONDS (fast)."""
        if outcome[0] == "crash" and len(outcome) > 2:
            return crash_backoff(int(outcome[2]))
        if outcome[0] == "backoff" and self.pull_backoff == "kubelet":
            return backoff(int(outcome[2]), KUBELET_PULL_BACKOFF)
        return RETRY_SECONDS

    def arch_of(self, node: str) -> str:
        """The node's CPU architecture, as its kubelet labels it (read once per node)."""
        if node not in self.archs:
            try:
                obj = self.kube.get(f"/api/v1/nodes/{node}") or {}
            except GpualignError:
                return "amd64"
            self.archs[node] = ((obj.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/arch", "amd64")
        return self.archs[node]

    def lookup(self, image: str, arch: str = "amd64") -> tuple[str | None, str, dict[str, str]]:
        """(driver version, '', the image's environment) when pullable from the lab registry for a node of `arch`,
        else (None, why, {}): an image with no linux/`arch` in its manifest (or index) is refused, as containerd
        refuses it."""
        host, repo, tag = split_image(image)
        if host != self.registry:
            return None, f"simulated pull: only the lab registry {self.registry} is reachable", {}
        client = RegistryClient(RegistryRef(host=host, repo=repo, scheme="http"), timeout=5.0)
        try:
            config, platforms = client.image_config_and_platforms(tag, arch=arch)
        except GpualignError as err:
            return None, err.message, {}
        finally:
            client.close()
        if config is None and not platforms:
            return None, f"manifest for {image} not found: manifest unknown", {}
        if arch not in platforms or config is None:
            return None, f"no match for platform linux/{arch} in manifest {image}: not found", {}
        env = config_env(config)
        return env.get("DRIVER_VERSION", ""), "", env

    def handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or node == realnode.NAME or meta.get("deletionTimestamp"):
            return  # a driver pod on the real node is the kubelet's: it really runs
        containers = spec.get("containers") or []
        image = containers[0]["image"] if containers else ""
        key = f"{meta['uid']}|{image}"
        outcome = self.decided.get(key)
        if outcome and (outcome[0] == "ready" or time.monotonic() - outcome[1] < self.wait_after(outcome)):
            return  # a crash-looping pod is restarted after its back-off: a fixed image pushed under its tag loads
        version, why, image_env = self.lookup(image, self.arch_of(node))
        ns, name = meta["namespace"], meta["name"]
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
        now = _now()
        # as the image's nvidia-driver init: the flavour the pod asks for first, then the kernel's load checks
        refusal = _flavour_refusal(image_env, containers[0] if containers else {}) if version is not None else None
        if refusal is None and version is not None:
            said = self.kernel_refuses(image, node, version)
            if isinstance(said, kernel_vm.Booting):  # the container waits while the kernel decides
                self._patch(path, _loading(containers, said.message, now))
                if key not in self.booting:
                    self.booting.add(key)
                    said.future.add_done_callback(lambda _f: self._booted(key, pod))
                return
            refusal = said
        if refusal is not None:  # pulled, but the node's kernel would not load its modules: crash-loop
            restarts = int(outcome[2]) + 1 if outcome and outcome[0] == "crash" and len(outcome) > 2 else 1
            self._patch(path, _crashing(containers, refusal, restarts, now))
            if not outcome or outcome[0] != "crash":
                log.info("%s/%s on %s: CrashLoopBackOff (%s)", ns, name, node, refusal)
                with contextlib.suppress(GpualignError):
                    self.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body=_pod_event(pod, refusal, now))
            self.decided[key] = ("crash", time.monotonic(), restarts)
            return
        if version is None:
            status = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                 "lastTransitionTime": now}],
                "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False,
                                       "restartCount": 0, "started": False,
                                       "state": {"waiting": {"reason": "ImagePullBackOff",
                                                             "message": f"Back-off pulling image \"{image}\": {why}"}}}
                                      for c in containers]}
            self._patch(path, status)
            if not outcome:
                log.info("%s/%s on %s: ImagePullBackOff (%s)", ns, name, node, why)
            failures = int(outcome[2]) + 1 if outcome and outcome[0] == "backoff" else 1
            self.decided[key] = ("backoff", time.monotonic(), failures)
            return
        delay = load_delay(pod)
        if delay:
            if key not in self.loading:  # the module starts "loading": look again once, when it is done
                self.loading[key] = time.monotonic()
                timer = threading.Timer(delay + 0.01, self._loaded, args=(key, pod))
                timer.daemon = True
                timer.start()
            if time.monotonic() - self.loading[key] < delay:
                return
        status = {"phase": "Running", "startTime": now, "hostIP": "10.0.0.1", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": c["image"], "ready": True,
                                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                                  for c in containers]}
        # The container is Ready first; GFD relabels the node after it sees the loaded driver, as on a real node.
        # (The other order would wake the GPU Operator's upgrade controller, which reacts to node label changes,
        # while the pod still looks unready: it then waits for its 2-minute requeue.)
        self._patch(path, status)
        if version:
            self._publish_driver(node, version)
        log.info("%s/%s on %s: Ready, driver %s loaded", ns, name, node, version or "?")
        self.decided[key] = ("ready", time.monotonic())

    def _publish_driver(self, node: str, version: str) -> None:
        """The loaded driver, where the cluster reads it: GFD's labels; in the operator's DRA mode (no GFD, the node
        has no nvidia.com/gpu.present), the driverVersion NVIDIA's DRA driver republishes in the node's slice."""
        obj = self.kube.get(f"/api/v1/nodes/{node}") or {}
        if L.GPU_PRESENT in (obj.get("metadata", {}).get("labels") or {}):
            self.kube.patch_node_labels(node, driver_labels(version))
            return
        path = f"/apis/resource.k8s.io/v1/resourceslices/{node}-{dra.DRIVER}"
        current = self.kube.get(path)
        if current is not None:
            spec = NodeSpec(node, gpus=len(current["spec"].get("devices") or []), dra=True)
            self.kube.apply_at(path, dra.resource_slice(spec, version))

    def kernel_refuses(self, image: str, node: str, version: str) -> str | kernel_vm.Booting | None:
        """The kernel's refusal of the image's modules on this node, or None (loaded, or a tag-only image), or
        Booting while its own kernel, booted in a VM, has not decided yet."""
        host, repo, tag = split_image(image)
        node_obj = self.kube.get(f"/api/v1/nodes/{node}") or {}
        # the node's release (what its kernel checks the modules' version magic against), as the kubelet reports
        # it, else read back from NFD's label (`_` for `+`)

        known = Kernel.from_node(((node_obj.get("metadata") or {}).get("labels") or {}).get(L.KERNEL),
                                 ((node_obj.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion"))
        kernel = known.release if known else None
        if not checkable(kernel):
            return None
        client = RegistryClient(RegistryRef(host=host, repo=repo, scheme="http"), timeout=30.0)
        trusted = kernel_load.enrolled(node_obj)
        try:
            result = kernel_load.load(client, tag, kernel, version, trusted)
        except GpualignError as err:
            return f"pulling the modules failed: {err.message}"
        finally:
            client.close()
        if not result.loaded:
            return result.message
        if result.modules is None or kernel is None:
            return None  # tag-only
        decided = self.vm.decide(result.modules, kernel, trusted)  # then the node's own kernel, booted
        if isinstance(decided, kernel_vm.Booting):
            return decided
        return None if decided.loaded else decided.message

    def _booted(self, key: str, pod: dict[str, Any]) -> None:
        self.booting.discard(key)
        self.handle_safely(pod)

    def _loaded(self, key: str, pod: dict[str, Any]) -> None:
        if key in self.loading:  # not deleted meanwhile
            self.handle_safely(pod)

    def handle_safely(self, pod: dict[str, Any]) -> None:
        """handle(), riding out what the cluster does meanwhile: a node or namespace deleted under the pod, an API
        server restarting. The simulator must outlive everyday events, as a kubelet does."""
        try:
            self.handle(pod)
        except GpualignError as err:
            meta = pod.get("metadata") or {}
            log.warning("%s/%s: %s", meta.get("namespace"), meta.get("name"), err.message)

    def _patch(self, path: str, status: dict[str, Any]) -> None:
        try:
            self.kube.patch(path, {"status": status})
        except GpualignError as err:  # the pod may be gone already
            log.warning("%s", err.message)

    def run(self, ready_file: Path | None) -> None:
        rv: str | None = None
        pods: dict[str, dict[str, Any]] = {}
        while True:
            try:
                if rv is None:
                    listing = self.kube.get_json("/api/v1/pods", params={"labelSelector": SELECTOR})
                    rv = listing["metadata"]["resourceVersion"]
                    pods = {p["metadata"]["uid"]: p for p in listing.get("items") or []}
                    for pod in pods.values():
                        self.handle_safely(pod)
                    if ready_file is not None and not ready_file.exists():
                        ready_file.write_text("ok\n")
                for kind, obj in self.kube.watch_raw("/api/v1/pods", label_selector=SELECTOR,
                                                     resource_version=rv, timeout_seconds=int(RETRY_SECONDS)):
                    if kind == "ERROR":
                        rv = None  # 410 Gone: list again
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if kind == "BOOKMARK":
                        continue
                    uid = obj["metadata"]["uid"]
                    if kind == "DELETED":
                        pods.pop(uid, None)
                        self.decided = {k: v for k, v in self.decided.items() if not k.startswith(uid)}
                        self.loading = {k: v for k, v in self.loading.items() if not k.startswith(uid)}
                        continue
                    pods[uid] = obj
                    self.handle_safely(obj)
            except GpualignError as err:
                log.warning("watch interrupted: %s", err.message)
                time.sleep(1)
                rv = None
                continue
            for pod in list(pods.values()):  # retry pulls that backed off, as the kubelet does
                self.handle_safely(pod)


def _flavour_refusal(image_env: dict[str, str], container: dict[str, Any]) -> str | None:
    """gpualign's nvidia-driver init refusing a pod that asks for the other flavour of modules than the image holds."""
    pod_env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or [] if e.get("name")}
    return init_refusal(image_env.get("GPUALIGN_KERNEL_MODULE_TYPE"), {**image_env, **pod_env},
                        pod_env.get("DRIVER_BRANCH") or image_env.get("DRIVER_BRANCH", ""),
                        image_env.get("GPUALIGN_KERNEL", "?"))


def _loading(containers: list[dict[str, Any]], message: str, now: str) -> dict[str, Any]:
    """The status of a driver container that is up and still loading its modules: Running, not Ready yet."""
    return {"phase": "Running", "startTime": now, "hostIP": "10.0.0.1", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": message,
         "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}],
        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": c["image"], "ready": False,
                               "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                              for c in containers]}


def _crashing(containers: list[dict[str, Any]], message: str, restarts: int, now: str) -> dict[str, Any]:
    """The status a kubelet reports for a driver container that exits at once (its modprobe refused)."""
    return {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}],
        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": c["image"], "ready": False,
                               "restartCount": restarts, "started": False,
                               "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                     "message": f"back-off restarting failed container {c['name']}: "
                                                                f"{message}"}},
                               "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message,
                                                            "startedAt": now, "finishedAt": now}}}
                              for c in containers]}


def _pod_event(pod: dict[str, Any], message: str, now: str) -> dict[str, Any]:
    meta = pod["metadata"]
    # the kernel's refusal, or the image's own init refusing the pod's request (gpualign: …)
    why = "driver container refused to load" if message.startswith(("gpualign:", "nvidia-driver:")) else \
        "driver modules refused by the node's kernel"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid", "")},
            "reason": "BackOff", "message": f"{why}: {message}"[:1024],
            "type": "Warning", "source": {"component": "kubelet (gpualign lab driver-sim)"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpualign-lab-driver-sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--registry", required=True, help="the lab registry, HOST:PORT")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--pull-backoff", choices=("fast", "kubelet"),
                        default=os.environ.get("GPUALIGN_LAB_PULL_BACKOFF", "fast"),
                        help="retry a failed pull every 2 s (fast), or after 10 s doubling up to 5 minutes, as a "
                             "kubelet does [default: $GPUALIGN_LAB_PULL_BACKOFF, else fast]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    sim = Simulator(Kube(args.kubeconfig, field_manager="gpualign-lab-driver-sim"), args.registry,
                    pull_backoff=args.pull_backoff)
    try:
        sim.run(args.ready_file)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
