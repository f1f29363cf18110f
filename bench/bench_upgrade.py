"""Benchmark: upgrade throughput on N kwok GPU nodes with P GPU pods each, at several maxParallelUpgrades.

For each parallelism the whole fleet is walked to another driver branch (580 → 595 → 580 …) by one
`gpualign upgrade --yes --to-branch B` process, and the script reports:
- wall time against the theoretical floor. The floor is the sum of the waits nothing can remove: on each node, kwok's
  configured pod-delete delay for the evicted GPU pods (they go concurrently: one delay), the driver pod's own
  delete delay, and the simulated driver load (driver-sim.gpualign.io/load-delay); nodes go maxParallel at a time,
  so floor = ceil(N / maxParallel) × per-node floor;
- API requests per node: gpualign's own, by verb and resource, from the API server's audit log (user agent
  gpualign-upgrade/…), and every client's, from the API server's apiserver_request_total metric. Target: no request
  whose count per node grows with the fleet (no LIST of all pods per node); --nodes 25 50 shows the trend.

    .venv/bin/python bench/bench_upgrade.py --nodes 50 --pods-per-node 10 --parallel 1 5 10
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_helpers import (  # noqa: E402
    GPUALIGN,
    BenchLab,
    bench_lab,
    create_nodes,
    driver_pool,
    gpu_workload,
    wait_until,
)

from gpualign.base import labels as L  # noqa: E402
from gpualign.lab.driver_sim import LOAD_DELAY  # noqa: E402
from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import (  # noqa: E402
    driver_version_for,
    wait_nodes_ready,
)

KERNEL = "5.15.0-124-generic"
BRANCHES = ("595", "580")
STATE = "nvidia.com/gpu-driver-upgrade-state"


def running_gpu_pods(lab: BenchLab) -> int:
    pods = lab.kube.pods("bench", label_selector="app=work")
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp"))


def ready_driver_pods(lab: BenchLab, version: str) -> int:
    nodes = lab.kube.nodes("gpualign.io/bench=upgrade")
    return sum(1 for n in nodes if n["metadata"]["labels"].get(L.DRIVER_CURRENT_FULL) == version)


def setup(lab: BenchLab, n: int, per_node: int, pod_delay: float, driver_delay: float, load: float,
          spare_gpus: int = 0) -> None:
    """n nodes with per_node + spare_gpus GPUs each, per_node GPU pods on each, and their driver pool."""
    driver_pool(lab, KERNEL, annotations={
        LOAD_DELAY: f"{load}s", "pod-delete.stage.kwok.x-k8s.io/delay": f"{int(driver_delay * 1000)}ms"})
    specs = [NodeSpec(f"up-{i:03d}", KERNEL, "ubuntu", "22.04", driver=driver_version_for("580"),
                      gpus=per_node + spare_gpus,
                      labels={"gpualign.io/bench": "upgrade"}) for i in range(n)]
    t0 = time.perf_counter()
    create_nodes(lab.kube, specs)
    wait_nodes_ready(lab.kube, [s.name for s in specs], timeout=300)
    print(f"{n} nodes Ready in {time.perf_counter() - t0:.1f}s", flush=True)
    gpu_workload(lab, n * per_node, pod_delay, {"gpualign.io/bench": "upgrade"})
    t0 = time.perf_counter()
    wait_until(f"{n * per_node} GPU pods Running", lambda: running_gpu_pods(lab) == n * per_node, timeout=600)
    wait_until("every node's driver loaded", lambda: ready_driver_pods(lab, driver_version_for("580")) == n)
    print(f"{n * per_node} GPU pods Running and {n} driver pods Ready in {time.perf_counter() - t0:.1f}s",
          flush=True)


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat: everything in the lab shares these cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def one_walk(lab: BenchLab, n: int, parallel: int, branch: str, work: Path) -> dict[str, object]:
    policy = work / f"policy-{parallel}.yaml"
    policy.write_text(f"maxParallelUpgrades: {parallel}\nmaxUnavailable: 100%\n")
    audit_mark = lab.audit_mark()
    server_before = lab.server_requests()
    cpu_before = machine_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "peak-rss-kib %M", *GPUALIGN, "upgrade", "--yes",
                           "-l", "gpualign.io/bench=upgrade", "--to-branch", branch,
                           "--ledger", f"registry://{lab.state.registry}/nvidia/driver",
                           "--upgrade-policy", str(policy)],
                          env=lab.env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    busy, total = (a - b for a, b in zip(machine_cpu(), cpu_before, strict=True))
    if proc.returncode != 0:
        raise RuntimeError(f"upgrade exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rss_kib = int(proc.stderr.strip().splitlines()[-1].split()[-1])
    server_after = lab.server_requests()
    ours = lab.audit_since(audit_mark, "gpualign-upgrade/")
    everyone = {k: server_after[k] - server_before.get(k, 0) for k in server_after
                if server_after[k] - server_before.get(k, 0) > 0}
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(rss_kib / 1024, 1),
            "machine_cpu_busy": round(busy / total, 3),
            "gpualign_requests": dict(sorted(ours.items())),
            "gpualign_requests_per_node": {k: round(v / n, 2) for k, v in sorted(ours.items())},
            "all_clients_requests": dict(sorted(everyone.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[50])
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 5, 10])
    ap.add_argument("--pod-delete-delay", type=float, default=1.0, help="kwok delay before an evicted pod is gone")
    ap.add_argument("--driver-delete-delay", type=float, default=0.5, help="the same for the driver pod")
    ap.add_argument("--driver-load", type=float, default=2.0, help="simulated driver module load, seconds")
    ap.add_argument("--out", type=Path, default=Path("bench/results/upgrade.json"))
    args = ap.parse_args()

    per_node_floor = args.pod_delete_delay + args.driver_delete_delay + args.driver_load
    results: list[dict[str, object]] = []
    for n in args.nodes:
        with bench_lab("upgrade") as lab:
            setup(lab, n, args.pods_per_node, args.pod_delete_delay, args.driver_delete_delay, args.driver_load)
            for i, parallel in enumerate(args.parallel):
                branch = BRANCHES[i % 2]
                row = one_walk(lab, n, parallel, branch, lab.state.dir)
                floor = math.ceil(n / parallel) * per_node_floor
                row.update({"nodes": n, "pods_per_node": args.pods_per_node, "max_parallel": parallel,
                            "to_branch": branch, "floor_s": round(floor, 2),
                            "wall_over_floor": round(float(row["wall_s"]) / floor, 2)})  # type: ignore[arg-type]
                results.append(row)
                per_node = row["gpualign_requests_per_node"]
                total = sum(per_node.values())  # type: ignore[union-attr]
                print(f"{n} nodes, maxParallel {parallel:>2}: wall {row['wall_s']:.1f}s, floor {floor:.1f}s "
                      f"({row['wall_over_floor']}x), RSS {row['peak_rss_mib']} MiB, machine CPU busy "
                      f"{row['machine_cpu_busy']:.0%}; "
                      f"gpualign requests/node {total:.1f}: "
                      + ", ".join(f"{k} {v}" for k, v in per_node.items()), flush=True)  # type: ignore[union-attr]
                want = n * args.pods_per_node
                wait_until("GPU pods back", lambda want=want: running_gpu_pods(lab) == want, timeout=300)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"per_node_floor_s": per_node_floor, "runs": results}, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
