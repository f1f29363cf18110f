"""Benchmark: the audit alone, in process, on N synthetic GPU nodes (five kernels, three OS releases): the part of
`check` that decides every node's image, without start-up or reads. `--before SRC` times another source tree's
audit in a process of its own, alternated.

    .venv/bin/python bench/bench_audit.py --nodes 5000 --repeat 25 --before ../older/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

KERNELS = (("5.15.0-124-generic", "ubuntu", "22.04"), ("5.15.0-125-generic", "ubuntu", "22.04"),
           ("6.8.0-48-generic", "ubuntu", "24.04"), ("6.8.0-1015-aws", "ubuntu", "22.04"),
           ("5.14.0-427.37.1.el9_4.x86_64", "rhel", "9.4"))

ONE = """
import json, statistics, sys, time
from gpualign.ledger.sources import Ledger
from gpualign.model.audit import AuditInput, audit
from gpualign.model.branches import BranchPolicy
from gpualign.model.facts import node_facts
from gpualign.loaders.rules import load_rules
nodes = [node_facts(i) for i in json.loads(sys.stdin.read())]
rules = load_rules()
ledger = Ledger(frozenset({"580-5.15.0-124-generic-ubuntu22.04"}), ("bench",))
def once():
    given = AuditInput(nodes, ledger, rules, BranchPolicy(default="580"), repository="reg.local/nvidia/driver")
    started = time.perf_counter()
    audit(given)
    return time.perf_counter() - started
once()
print(json.dumps([once() for _ in range(int(sys.argv[2]))]))
"""


def nodes(n: int) -> list[dict[str, object]]:
    return [{"metadata": {"name": f"gpu-{i:05d}", "labels": {
        "nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/kernel-version.full": KERNELS[i % 5][0],
        "feature.node.kubernetes.io/system-os_release.ID": KERNELS[i % 5][1],
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": KERNELS[i % 5][2],
        "nvidia.com/cuda.driver-version.full": "580.95.05"}}} for i in range(n)]


def timed(src: Path, items: str, repeat: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", ONE, "-", str(repeat)], env=env, check=True, capture_output=True,
                         text=True, input=items).stdout
    return list(json.loads(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--before", type=Path, metavar="SRC", help="another source tree's audit, alternated")
    ap.add_argument("--out", type=Path, default=Path("bench/results/audit.json"))
    args = ap.parse_args()
    items = json.dumps(nodes(args.nodes))
    trees = {"gpualign": Path(__file__).resolve().parent.parent / "src"}
    if args.before:
        trees["gpualign before"] = args.before
    runs: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(3):  # alternated, in three rounds
        for name, src in trees.items():
            runs[name] += timed(src, items, args.repeat)
    medians = {name: sorted(r)[len(r) // 2] for name, r in runs.items()}
    print(f"audit, {args.nodes} nodes: " + "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in medians.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"nodes": args.nodes, "median_s": medians, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
