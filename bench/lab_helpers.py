"""What the benchmarks share: a private lab, node creation, and the API server's own request counts.

Request counts come from two places in the lab's API server, both read after the fact:
- `apiserver_request_total` on /metrics: every client, by verb and resource (the server's own metric);
- the audit log, which the lab writes for the admin identity's reads and writes, so one tool's requests can be
  told apart by user agent (gpualign sends `gpualign-<part>/<version>`, kubectl `kubectl/…`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.kube.client import Kube  # noqa: E402
from gpualign.lab import cluster, versions  # noqa: E402
from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import (  # noqa: E402
    DRIVER_NAMESPACE,
    driver_daemonset,
    driver_version_for,
    node_manifest,
    push_driver_image,
    registry_client,
)

GPUALIGN = [sys.executable, "-m", "gpualign"]
# Benchmark labs have no real node unless one measures it (bench_real_node.py): it is one per machine.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")
KUBECTL = str(versions.default_bin_dir() / "kubectl")


@dataclass
class BenchLab:
    state: cluster.LabState
    env: dict[str, str]
    kube: Kube

    @property
    def audit_log(self) -> Path:
        return self.state.dir / "logs" / "audit.log"

    def audit_mark(self) -> int:
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_since(self, mark: int, agent_prefix: str) -> Counter[str]:
        """Completed requests by one client (user agent prefix) since mark, keyed 'VERB resource[/sub]'."""
        counts: Counter[str] = Counter()
        with self.audit_log.open("rb") as fh:
            fh.seek(mark)
            for line in fh:
                entry = json.loads(line)
                if entry.get("stage") != "ResponseComplete" or not entry.get("userAgent", "").startswith(agent_prefix):
                    continue
                ref = entry.get("objectRef") or {}
                what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                verb = entry["verb"]
                uri = entry.get("requestURI", "")
                if verb == "list" and "watch=true" in uri:
                    verb = "watch"
                if "fieldSelector=spec.nodeName" in uri:
                    what += " (one node)"
                counts[f"{verb} {what}"] += 1
        return counts

    def audit_agents(self, mark: int) -> dict[str, int]:
        """Completed requests per user agent since mark (to see who the clients were)."""
        counts: Counter[str] = Counter()
        with self.audit_log.open("rb") as fh:
            fh.seek(mark)
            for line in fh:
                entry = json.loads(line)
                if entry.get("stage") == "ResponseComplete":
                    counts[entry.get("userAgent", "?").split(" ", 1)[0]] += 1
        return dict(counts.most_common(10))

    def server_requests(self) -> Counter[str]:
        """apiserver_request_total summed by 'VERB resource[/sub]' (all clients)."""
        text = self.kube.request("GET", "/metrics").text
        counts: Counter[str] = Counter()
        for m in re.finditer(r"(?m)^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$", text):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            counts[f"{labels.get('verb', '?')} {what}"] += int(float(m.group(2)))
        return counts


@contextlib.contextmanager
def bench_lab(prefix: str, scenario: str = "empty") -> Iterator[BenchLab]:
    """A private lab (empty unless told) for one benchmark run; torn down afterwards whatever happens."""
    work = Path(tempfile.mkdtemp(prefix=f"gpualign-bench-{prefix}-"))
    env = dict(os.environ, GPUALIGN_LAB_DIR=str(work / "lab"))
    subprocess.run([*GPUALIGN, "lab", "up", "--scenario", scenario], env=env, check=True)
    kube = None
    try:
        state = cluster.LabState.load(work / "lab")
        assert state is not None
        env["KUBECONFIG"] = str(state.kubeconfig)
        kube = Kube(str(state.kubeconfig), field_manager="gpualign-bench")
        yield BenchLab(state, env, kube)
    finally:
        if kube is not None:
            kube.close()
        subprocess.run([*GPUALIGN, "lab", "down"], env=env)


def create_nodes(kube: Kube, specs: list[NodeSpec], workers: int = 16) -> None:
    def one(spec: NodeSpec) -> None:
        resp = kube.request("POST", "/api/v1/nodes", body=node_manifest(spec))
        if resp.status_code not in (201, 409):
            raise RuntimeError(f"creating node {spec.name}: HTTP {resp.status_code} {resp.text[:200]}")

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, specs))


def driver_pool(lab: BenchLab, kernel: str, *, annotations: dict[str, str] | None = None) -> None:
    """One Ubuntu 22.04 kernel pool on branch 580: images for 580 and 595 in the lab registry (so a walk can go
    either way) and its OnDelete driver DaemonSet, its pods annotated as given."""
    reg = registry_client(lab.state.registry)
    try:
        for branch in ("580", "595"):
            push_driver_image(reg, f"{branch}-{kernel}-ubuntu22.04", driver_version_for(branch))
    finally:
        reg.close()
    lab.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}})
    ds = driver_daemonset(kernel, "ubuntu", "22.04", "580", lab.state.registry)
    if annotations:
        ds["spec"]["template"]["metadata"]["annotations"] = dict(annotations)
    lab.kube.apply(ds)


def gpu_workload(lab: BenchLab, replicas: int, pod_delay: float, node_selector: dict[str, str]) -> None:
    """Deployment bench/work: `replicas` pods of one GPU each on the selected nodes; kwok removes an evicted one
    after pod_delay seconds."""
    lab.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    lab.kube.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "work", "namespace": "bench"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "work"}},
                 "template": {"metadata": {"labels": {"app": "work"}, "annotations": {
                     "pod-delete.stage.kwok.x-k8s.io/delay": f"{int(pod_delay * 1000)}ms"}},
                     "spec": {"nodeSelector": dict(node_selector), "containers": [{
                         "name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})


def wait_until(what: str, check: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
