"""Run `gpualign upgrade` as a real process and follow its progress lines."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from gpualign.base import labels as L
from tests.support.waits import pod_ready

# The default lab scenario's five driver pools, as `<kernel>-<os-tag>`: push `595-<pool>` to upgrade them all.
POOLS = ["5.15.0-124-generic-ubuntu22.04", "6.8.0-48-generic-ubuntu24.04", "6.8.0-1015-aws-ubuntu22.04",
         "6.8.0-1017-azure-ubuntu24.04", "6.8.0-1015-gcp-ubuntu22.04"]

# Lines `gpualign upgrade` prints as a node crosses each state boundary, in walk order.
BOUNDARIES = ["→ cordon-required", "→ wait-for-jobs-required", "→ pod-deletion-required", "evicted ",
              "→ pod-restart-required", "restarting driver pod", "→ validation-required", "→ uncordon-required",
              "→ upgrade-done"]


@dataclass
class UpgradeProcess:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _q: queue.Queue[str] = field(default_factory=queue.Queue)

    @classmethod
    def start(cls, env: dict[str, str], *args: str) -> UpgradeProcess:
        proc = subprocess.Popen([sys.executable, "-m", "gpualign", "upgrade", "--yes", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **env})
        self = cls(proc)
        threading.Thread(target=self._pump, daemon=True).start()
        return self

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line)

    def wait_line(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if needle in line:
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None and seen == len(self.lines):
                time.sleep(0.2)
                if not any(needle in ln for ln in self.lines):
                    raise AssertionError(f"upgrade exited {self.proc.returncode} before {needle!r}:\n"
                                         + "\n".join(self.lines[-30:]))
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} after {timeout}s:\n" + "\n".join(self.lines[-30:]))

    def finish(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def serve_workload() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "serve"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm", "namespace": "serve"},
         "spec": {"replicas": 12, "selector": {"matchLabels": {"app": "llm"}},
                  "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {
                      "nodeSelector": {L.GPU_PRESENT: "true"},
                      "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                     "whenUnsatisfiable": "ScheduleAnyway",
                                                     "labelSelector": {"matchLabels": {"app": "llm"}}}],
                      "containers": [{"name": "llm", "image": "nvcr.io/nvidia/tritonserver:25.01-py3",
                                      "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "llm-pdb", "namespace": "serve"},
         "spec": {"minAvailable": 10, "selector": {"matchLabels": {"app": "llm"}}}},
    ]


def all_pods_ready(kube) -> bool:
    """Every Deployment of ml and serve rolled out (all its replicas created and available: a ReplicaSet creates
    them in batches, so the pods that exist being Ready is not enough), and every pod Ready or finished."""
    for ns in ("ml", "serve"):
        for d in kube.list_raw(f"/apis/apps/v1/namespaces/{ns}/deployments"):
            st = d.get("status") or {}
            if st.get("observedGeneration") != d["metadata"].get("generation") or \
                    st.get("availableReplicas") != d["spec"].get("replicas") or \
                    st.get("replicas") != d["spec"].get("replicas"):
                return False
    pods = [p for ns in ("ml", "serve") for p in kube.pods(ns)]
    return bool(pods) and all(pod_ready(p) or (p.get("status") or {}).get("phase") == "Succeeded" for p in pods)


def build_twenty(lab) -> None:  # noqa: ANN001 - tests.conftest.Lab
    """The reliability fleet: the default lab plus 14 nodes (20 GPU nodes), 595 images for every pool, the trainer
    PDB at minAvailable 1 and a 12-replica serving workload under a minAvailable-10 PDB."""
    from gpualign.lab.scenarios import NodeSpec
    from gpualign.lab.seed import add_node, driver_version_for
    from tests.support.waits import wait_for

    kube = lab.kube()
    for pool in POOLS:
        assert lab.cli("lab", "push-image", f"595-{pool}").code == 0
    for i in range(14):
        add_node(kube, NodeSpec(f"gpu-k{i:02d}", "5.15.0-124-generic", "ubuntu", "22.04",
                                driver=driver_version_for("580")), branch="580", registry=lab.registry)
    kube.patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 1}})
    for obj in serve_workload():
        kube.apply(obj)
    wait_for(lambda: len(kube.nodes(f"{L.GPU_PRESENT}=true")) == 20, what="20 GPU nodes")
    wait_for(lambda: all_pods_ready(kube), timeout=120, what="workloads Ready")
