"""Benchmark: what the lab's real node costs. Median of --repeat runs each:
- `lab up --scenario empty` with no real node and with one (the difference is the node's start-up);
- on the node: a hostNetwork pod of gpualign's image to Running (image already pulled), and a Job (`sleep 3`) to
  Complete, as the real Job controller reports it;
- the resident memory of the node's processes once a pod runs: kubelet, containerd and the pods' shims.

    .venv/bin/python bench/bench_real_node.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.kube.client import Kube  # noqa: E402
from gpualign.lab import cluster, realnode  # noqa: E402

GPUALIGN = [sys.executable, "-m", "gpualign"]
ON_NODE = {"nodeSelector": {realnode.LABEL: "true"},
           "tolerations": [{"key": realnode.LABEL, "operator": "Exists", "effect": "NoSchedule"}]}


def lab_up(env: dict[str, str], real: bool) -> float:
    t0 = time.perf_counter()
    subprocess.run([*GPUALIGN, "lab", "up", "--scenario", "empty", "--real-node" if real else "--no-real-node"],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def until(probe, timeout: float = 120.0) -> None:  # noqa: ANN001 - a zero-argument callable
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit("bench_real_node: timed out")
        time.sleep(0.05)


def phase(kube: Kube, path: str) -> str:
    obj = kube.get(path) or {}
    return str(obj.get("status", {}).get("phase", ""))


def complete(kube: Kube, path: str) -> bool:
    obj = kube.get(path) or {}
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in obj.get("status", {}).get("conditions", []))


def on_node(kube: Kube, image: str, i: int) -> tuple[float, float]:
    ns = realnode.NAMESPACE
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": ns},
           "spec": {**ON_NODE, "hostNetwork": True,
                    "containers": [{"name": "c", "image": image, "command": ["sleep", "600"]}]}}
    t0 = time.perf_counter()
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
    until(lambda: phase(kube, f"/api/v1/namespaces/{ns}/pods/p{i}") == "Running")
    pod_s = time.perf_counter() - t0
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"j{i}", "namespace": ns},
           "spec": {"backoffLimit": 0, "template": {"spec": {**ON_NODE, "restartPolicy": "Never", "containers": [
               {"name": "c", "image": image, "command": ["sleep", "3"]}]}}}}
    t0 = time.perf_counter()
    kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
    until(lambda: complete(kube, f"/apis/batch/v1/namespaces/{ns}/jobs/j{i}"))
    return pod_s, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "real_node.json")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"up_without_s": [], "up_with_s": [], "pod_running_s": [], "job_complete_s": []}
    rss: list[dict[str, float]] = []
    for i in range(args.repeat):
        for real in (False, True):
            state = tempfile.mkdtemp(prefix="gpualign-realnode-")
            env = dict(os.environ, GPUALIGN_LAB_DIR=state)
            try:
                times["up_with_s" if real else "up_without_s"].append(lab_up(env, real))
                if not real:
                    continue
                image = subprocess.run([*GPUALIGN, "lab", "push-self"], env=env, check=True, capture_output=True,
                                       text=True).stdout.strip()
                lab = cluster.LabState.load(Path(state))
                assert lab is not None
                kube = Kube(str(lab.kubeconfig))
                on_node(kube, image, 0)  # the first pull, not timed
                pod_s, job_s = on_node(kube, image, 1)
                times["pod_running_s"].append(pod_s)
                times["job_complete_s"].append(job_s)
                shims = [int(p) for p in realnode.leftovers(Path(state), {})["processes"]
                         if "containerd-shim" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
                rss.append({"kubelet_mb": round(rss_mb(lab.procs["kubelet"].pid), 1),
                            "containerd_mb": round(rss_mb(lab.procs["containerd"].pid), 1),
                            "shim_mb_each": round(statistics.median(rss_mb(p) for p in shims), 1) if shims else 0.0,
                            "shims": len(shims)})
                kube.close()
            finally:
                subprocess.run([*GPUALIGN, "lab", "down"], env=env, capture_output=True)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in times.items() if v), flush=True)
    result = {k: {"median": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]} for k, v in times.items()}
    result["rss"] = rss
    added = result["up_with_s"]["median"] - result["up_without_s"]["median"]
    print(f"lab up --scenario empty: {result['up_without_s']['median']:.2f}s without, "
          f"{result['up_with_s']['median']:.2f}s with the real node (+{added:.2f}s)")
    print(f"pod to Running {result['pod_running_s']['median']:.2f}s, Job (sleep 3) to Complete "
          f"{result['job_complete_s']['median']:.2f}s; RSS {rss[-1]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
