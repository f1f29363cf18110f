"""Benchmark: the GPU Operator's own upgrade walk against `gpualign upgrade`, on the same fleet shape.

The fleet: N kwok GPU nodes (Ubuntu 22.04, one kernel), P GPU pods on each (kwok deletes an evicted pod after
--pod-delete-delay), maxParallelUpgrades M, maxUnavailable 100 %, drain off, no waitForCompletion; the driver loads
at once in both (the operator's driver pods carry no simulated load delay, so gpualign's get none either).
- operator: the lab's `operator-nvidiadriver` scenario plus an NVIDIADriver `bench` for the N nodes; autoUpgrade on;
  timed from the NVIDIADriver's version change (580 → 595) until every node is upgrade-done on the new driver.
- gpualign: the same nodes and pods on a lab whose driver DaemonSet the lab owns (gpualign refuses to walk
  operator-owned DaemonSets: the operator either walks them itself or deletes the state label, see docs/gate.md); timed
  from `gpualign upgrade --to-branch 595` until it exits.
Runs alternate (operator, gpualign, operator, gpualign, …), each on a fresh lab. Measured per run: wall time;
node-seconds cordoned (sampled every 0.25 s); API requests by the walker's user agent from the API server's audit
log (the operator runs with the lab's admin identity, whose requests the lab audits). Target: gpualign <= 0.5x the
operator's wall time, with no more node-seconds cordoned.

    .venv/bin/python bench/bench_operator_walk.py --nodes 20 --pods-per-node 4 --parallel 2 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_upgrade import KERNEL, setup  # noqa: E402
from lab_helpers import GPUALIGN, BenchLab, bench_lab, create_nodes, gpu_workload, median, wait_until  # noqa: E402

from gpualign.base import labels as L  # noqa: E402
from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import driver_version_for, wait_nodes_ready  # noqa: E402

STATE = "nvidia.com/gpu-driver-upgrade-state"
NEW = driver_version_for("595")


class Sampler:
    """Node-seconds cordoned, and when the last node reached upgrade-done on the new driver."""

    def __init__(self, lab: BenchLab, selector: str) -> None:
        self.lab, self.selector = lab, selector
        self.cordoned_node_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            nodes = self.lab.kube.nodes(self.selector)
            now = time.perf_counter()
            self.cordoned_node_s += (now - last) * sum(1 for n in nodes if (n.get("spec") or {}).get("unschedulable"))
            last = now
            self._stop.wait(0.25)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=10)
        return round(self.cordoned_node_s, 1)


def all_done(lab: BenchLab, selector: str, n: int) -> bool:
    nodes = lab.kube.nodes(selector)
    return len(nodes) == n and all((x["metadata"].get("labels") or {}).get(STATE) == "upgrade-done"
                                   and x["metadata"]["labels"].get(L.DRIVER_CURRENT_FULL) == NEW for x in nodes)


def gpu_pods(lab: BenchLab, n: int, per_node: int, pod_delay: float, selector: dict[str, str]) -> None:
    gpu_workload(lab, n * per_node, pod_delay, selector)

    def running() -> bool:
        pods = lab.kube.pods("bench", label_selector="app=work")
        return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") == n * per_node

    wait_until("GPU pods Running", running, timeout=300)


def operator_run(args: argparse.Namespace) -> dict[str, object]:
    with bench_lab("opwalk-operator", scenario="operator-nvidiadriver") as lab:
        subprocess.run([*GPUALIGN, "lab", "push-image", f"595-{KERNEL}-ubuntu22.04"], env=lab.env, check=True,
                       capture_output=True)
        repo = f"{lab.state.registry}/nvidia"
        lab.kube.apply_at("/apis/nvidia.com/v1alpha1/nvidiadrivers/bench", {
            "apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "bench"},
            "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": repo, "image": "driver",
                     "version": "580", "nodeSelector": {"pool": "bench"},
                     "manager": {"repository": repo, "image": "k8s-driver-manager", "version": "v0.8.1"}}})
        specs = [NodeSpec(f"op-{i:03d}", KERNEL, "ubuntu", "22.04", gpus=args.pods_per_node,
                          labels={"pool": "bench"}) for i in range(args.nodes)]
        create_nodes(lab.kube, specs)
        wait_nodes_ready(lab.kube, [s.name for s in specs], timeout=300)
        wait_until("the operator's drivers loaded", lambda: all(
            (x["metadata"].get("labels") or {}).get(L.DRIVER_CURRENT_FULL) == driver_version_for("580")
            for x in lab.kube.nodes("pool=bench")), timeout=300)
        gpu_pods(lab, args.nodes, args.pods_per_node, args.pod_delete_delay, {"pool": "bench"})
        policy = {"autoUpgrade": True, "maxParallelUpgrades": args.parallel, "maxUnavailable": "100%",
                  "waitForCompletion": {"timeoutSeconds": 0},
                  "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
                  "drain": {"enable": False, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False}}
        lab.kube.patch("/apis/nvidia.com/v1/clusterpolicies/cluster-policy",
                       {"spec": {"driver": {"upgradePolicy": policy}}})
        wait_until("every node upgrade-done before the change", lambda: all(
            (x["metadata"].get("labels") or {}).get(STATE) == "upgrade-done" for x in lab.kube.nodes("pool=bench")),
            timeout=120)
        mark = lab.audit_mark()
        sampler = Sampler(lab, "pool=bench")
        t0 = time.perf_counter()
        lab.kube.patch("/apis/nvidia.com/v1alpha1/nvidiadrivers/bench", {"spec": {"version": "595"}})
        wait_until("the operator's walk", lambda: all_done(lab, "pool=bench", args.nodes), timeout=args.walk_timeout)
        wall = time.perf_counter() - t0
        cordoned = sampler.stop()
        agents = lab.audit_agents(mark)
        ours = lab.audit_since(mark, "gpu-operator")
        return {"walker": "operator", "wall_s": round(wall, 2), "cordoned_node_s": cordoned,
                "requests": sum(ours.values()), "requests_per_node": round(sum(ours.values()) / args.nodes, 1),
                "requests_by_kind": dict(ours.most_common(12)), "user_agents": agents}


def gpualign_run(args: argparse.Namespace) -> dict[str, object]:
    with bench_lab("opwalk-gpualign") as lab:
        setup(lab, args.nodes, args.pods_per_node, args.pod_delete_delay, 0.0, 0.0)
        policy = lab.state.dir / "policy.yaml"
        policy.write_text(f"maxParallelUpgrades: {args.parallel}\nmaxUnavailable: 100%\n")
        mark = lab.audit_mark()
        sampler = Sampler(lab, "gpualign.io/bench=upgrade")
        t0 = time.perf_counter()
        proc = subprocess.run([*GPUALIGN, "upgrade", "--yes", "-l", "gpualign.io/bench=upgrade", "--to-branch",
                               "595", "--ledger", f"registry://{lab.state.registry}/nvidia/driver", "--upgrade-policy",
                               str(policy)], env=lab.env, capture_output=True, text=True, timeout=args.walk_timeout)
        wall = time.perf_counter() - t0
        cordoned = sampler.stop()
        if proc.returncode != 0 or not all_done(lab, "gpualign.io/bench=upgrade", args.nodes):
            raise RuntimeError(f"gpualign's walk did not finish: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        ours = lab.audit_since(mark, "gpualign-upgrade/")
        return {"walker": "gpualign", "wall_s": round(wall, 2), "cordoned_node_s": cordoned,
                "requests": sum(ours.values()), "requests_per_node": round(sum(ours.values()) / args.nodes, 1),
                "requests_by_kind": dict(ours.most_common(12))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--pods-per-node", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--pod-delete-delay", type=float, default=1.0)
    ap.add_argument("--walk-timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=Path("bench/results/operator-walk.json"))
    args = ap.parse_args()
    runs: list[dict[str, object]] = []
    for _ in range(args.repeat):
        for run in (operator_run, gpualign_run):
            row = run(args)
            runs.append(row)
            print(f"{row['walker']:>8}: wall {row['wall_s']}s, cordoned {row['cordoned_node_s']} node-s, "
                  f"{row['requests_per_node']} requests/node", flush=True)
    by: dict[str, list[dict[str, object]]] = {}
    for r in runs:
        by.setdefault(str(r["walker"]), []).append(r)
    op = median([float(r["wall_s"]) for r in by["operator"]])  # type: ignore[arg-type]
    gp = median([float(r["wall_s"]) for r in by["gpualign"]])  # type: ignore[arg-type]
    summary = {"operator_wall_median_s": op, "gpualign_wall_median_s": gp, "gpualign_over_operator": round(gp / op, 2),
               "operator_cordoned_median_node_s": median([float(r["cordoned_node_s"])  # type: ignore[arg-type]
                                                           for r in by["operator"]]),
               "gpualign_cordoned_median_node_s": median([float(r["cordoned_node_s"])  # type: ignore[arg-type]
                                                           for r in by["gpualign"]])}
    print(json.dumps(summary), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)}, "runs": runs,
                                    "summary": summary}, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
