"""Benchmark: the walk's pod rules alone, in process: which of N pods an upgrade moves off their nodes (pod deletion,
then the drain) and which kubectl drain's rules refuse (`upgrade.pods.to_move`, `unmovable`), the work the
preflight does over every pod of the nodes it admits. `--before SRC` times another source tree's rules in a process
of its own, alternated.

    .venv/bin/python bench/bench_walk_pods.py --pods 50000 --repeat 9 --before ../older/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ONE = """
import json, sys, time
from gpualign.upgrade import pods as P
from gpualign.upgrade.upgrade_policy import UpgradePolicy

def pod(i):
    gpu = i % 3 == 0
    return {"metadata": {"name": f"p{i}", "namespace": "ns", "labels": {"app": "train" if gpu else "web"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": i % 7 != 0}]},
            "spec": {"nodeName": f"n{i % 100}", "volumes": [{"name": "v", "emptyDir": {}}] if i % 5 == 0 else [],
                     "containers": [{"name": "c", "image": "i",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}} if gpu else {}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}

pods = [pod(i) for i in range(int(sys.argv[1]))]
policy = UpgradePolicy()
t = time.perf_counter()
moved = P.to_move(pods, drain=False), P.to_move(pods, drain=True)
refused = P.unmovable(pods, policy)
print(json.dumps({"seconds": time.perf_counter() - t, "moved": [len(m) for m in moved], "refused": len(refused)}))
"""


def once(src: Path, pods: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", ONE, str(pods)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=50000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--before", type=Path, help="another source tree (its src/) to time alternately")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "walk-pods.json")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent / "src"
    trees = {"now": here, **({"before": args.before.resolve()} if args.before else {})}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, src in trees.items():
            runs[name].append(once(src, args.pods))
    result = {"pods": args.pods, "repeat": args.repeat}
    for name, rows in runs.items():
        median = statistics.median(r["seconds"] for r in rows)
        result[name] = {"median_seconds": round(median, 4), "per_pod_us": round(median / args.pods * 1e6, 2),
                        "moved": rows[0]["moved"], "refused": rows[0]["refused"]}
        print(f"{name:7} {median:.3f} s for {args.pods:,} pods ({median / args.pods * 1e6:.2f} µs a pod); "
              f"moved {rows[0]['moved']}, refused {rows[0]['refused']}")
    if "before" in runs and (result["before"]["moved"], result["before"]["refused"]) != \
            (result["now"]["moved"], result["now"]["refused"]):
        print("the two trees move or refuse different pods", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
