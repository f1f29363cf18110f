"""Benchmark: `check --all-contexts` over several clusters against the slowest single-cluster check, in the same
run. Three labs (each its own control plane), N kwok GPU nodes each; the clusters are read concurrently, so the
target (issue: check at the speed of the wire) is all contexts <= 1.2x the slowest single-cluster check.

Beside them, the same for the floor (bench_check's: curl fetching the LISTs check makes): each cluster's alone,
and all of them at once (one curl per cluster, started together). What the floors at once cost over the slowest
floor alone is what the machine itself adds when its API servers answer together.

    .venv/bin/python bench/bench_fleet.py --nodes 5000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check import KERNELS, create_nodes, floor_command, pause_writers, timed  # noqa: E402

from gpualign.kube.client import Kube  # noqa: E402
from gpualign.lab import cluster  # noqa: E402
from gpualign.lab.seed import push_driver_image, registry_client  # noqa: E402

GPUALIGN = [sys.executable, "-m", "gpualign"]


def together(cmds: list[list[str]], env: dict[str, str]) -> float:
    """Wall seconds of several commands started at once, until the last ends."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000, help="GPU nodes per cluster")
    ap.add_argument("--clusters", nargs="+", default=["east", "west", "north"], help="one lab each")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--idle", action="store_true",
                    help="API servers that are not busy: nodes no kwok renews, each lab's writers paused "
                         "(writes bench/results/fleet-idle.json)")
    ap.add_argument("--before", type=Path, metavar="SRC",
                    help="also time --all-contexts from another source tree (an older commit's src/), alternated")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.out = args.out or Path("bench/results/fleet-idle.json" if args.idle else "bench/results/fleet.json")
    # Each tree runs from bytecode, as an installed copy does (PYTHONDONTWRITEBYTECODE would otherwise have a
    # checkout compile every module it imports on every run).
    for tree in (Path(__file__).resolve().parent.parent / "src", *([args.before] if args.before else [])):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)

    work = Path(tempfile.mkdtemp(prefix="gpualign-bench-fleet-"))
    labs = {name: work / name for name in args.clusters}
    envs = {name: dict(os.environ, GPUALIGN_LAB_DIR=str(d)) for name, d in labs.items()}
    try:
        for env in envs.values():
            subprocess.run([*GPUALIGN, "lab", "up", "--scenario", "empty"], env=env, check=True)
        states = {name: cluster.LabState.load(d) for name, d in labs.items()}
        kubeconfigs = []
        for state in states.values():
            assert state is not None
            kubeconfigs.append(str(state.kubeconfig))
            kube = Kube(str(state.kubeconfig))
            if args.idle:
                pause_writers(state)
            t0 = time.perf_counter()
            create_nodes(kube, 0, args.nodes, managed=not args.idle)
            kube.close()
            print(f"created {args.nodes} nodes in {time.perf_counter() - t0:.1f}s on {state.apiserver}", flush=True)
        first = states[args.clusters[0]]
        assert first is not None
        reg = registry_client(first.registry)
        for k in KERNELS:
            push_driver_image(reg, f"580-{k}-ubuntu22.04", "580.173.02")
        reg.close()
        env = dict(os.environ, KUBECONFIG=":".join(kubeconfigs))
        base = [*GPUALIGN, "check", "--ledger", f"registry://{first.registry}/nvidia/driver", "--driver-branch",
                "580", "-o", "json"]
        commands = {f"{name} alone": [*base, "--context", f"gpualign-{name}"] for name in args.clusters}
        commands["--all-contexts"] = [*base, "--all-contexts"]
        if args.before:
            commands["--all-contexts, before"] = ["env", f"PYTHONPATH={args.before}", *base, "--all-contexts"]
        floors = {f"floor {name} alone": floor_command(states[name].kubeconfig)
                  for name in args.clusters}
        times: dict[str, list[float]] = {k: [] for k in [*commands, *floors, "floors at once"]}
        for _ in range(args.repeat):  # alternate, so drift hits every command alike
            for name, cmd in {**commands, **floors}.items():
                times[name].append(timed(cmd, env)[0])
            times["floors at once"].append(together(list(floors.values()), env))
        med = {k: statistics.median(v) for k, v in times.items()}
        slowest = max(v for k, v in med.items() if k.endswith(" alone") and not k.startswith("floor "))
        ratio = med["--all-contexts"] / slowest
        slowest_floor = max(v for k, v in med.items() if k.startswith("floor ") and k.endswith(" alone"))
        machine = med["floors at once"] / slowest_floor
        for name, value in med.items():
            print(f"{name:<22} {value:.3f}s", flush=True)
        print(f"all contexts / slowest single: {ratio:.2f}x (target <= 1.2x: {'met' if ratio <= 1.2 else 'MISSED'})")
        before_ratio = med["--all-contexts, before"] / slowest if args.before else None
        if before_ratio is not None:
            print(f"before: {before_ratio:.2f}x")
        print(f"floors at once / slowest floor alone: {machine:.2f}x (what the machine adds, with no client work)")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"nodes_per_cluster": args.nodes, "idle": args.idle, "median_s": med,
                                        "ratio": round(ratio, 3),
                                        "ratio_before": round(before_ratio, 3) if before_ratio else None,
                                        "floors_at_once_ratio": round(machine, 3), "runs": times},
                                       indent=2) + "\n")
        print(f"results: {args.out}")
    finally:
        for name, env in envs.items():
            loaded = cluster.LabState.load(labs[name]) if labs[name].exists() else None
            if args.idle and loaded is not None:
                pause_writers(loaded, signal.SIGCONT)
            subprocess.run([*GPUALIGN, "lab", "down"], env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
