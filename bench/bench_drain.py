"""Benchmark: moving 100 GPU pods off a node — gpualign's eviction against `kubectl drain --pod-selector`.

Two nodes of the same shape (same labels, driver pool and capacity) each run a Deployment of --pods GPU pods pinned
to them. Alternating, --repeat times each:
- kubectl: `kubectl drain NODE --pod-selector app=NODE --timeout 300s` (cordon, evict every selected pod at
  once, poll until each is gone), then `kubectl uncordon NODE`;
- gpualign: `gpualign upgrade --yes -l kubernetes.io/hostname=NODE --to-branch B` (580 and 595 alternate, so the node
  always needs its driver moved), which cordons, waits for jobs (none), evicts the GPU pods with bounded concurrency
  (evictionConcurrency, default 8) and, once they are gone, restarts the driver and uncordons.
After each run the replacement pods are back and Running before the next one starts.

Reported, medians: the whole command up to "every GPU pod gone" (process start included: Python's ~1 s against
kubectl's ~0.1 s), and the eviction phase alone (cordoned → all gone: kubectl's "cordoned" line to its "drained"
line; gpualign's "→ pod-deletion-required" line to its "→ pod-restart-required" line). Also the API requests each
tool made in that run, from the API server's audit log by user agent. Target: gpualign ≤ 1.0× kubectl.

    .venv/bin/python bench/bench_drain.py --pods 100 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_helpers import (  # noqa: E402
    GPUALIGN,
    KUBECTL,
    BenchLab,
    bench_lab,
    create_nodes,
    driver_pool,
    median,
    wait_until,
)

from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import (  # noqa: E402
    driver_version_for,
    wait_nodes_ready,
)

KERNEL = "5.15.0-124-generic"
NODES = {"kubectl": "drain-k", "gpualign": "drain-g"}


def timed_lines(cmd: list[str], env: dict[str, str], marks: dict[str, str]) -> tuple[float, dict[str, float], str]:
    """Run cmd; return its wall time and, for each mark, when the first output line containing it arrived."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    seen: dict[str, float] = {}
    out: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        for key, needle in marks.items():
            if key not in seen and needle in line:
                seen[key] = time.perf_counter() - t0
    code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{cmd[:3]} exited {code}:\n{''.join(out[-30:])}")
    missing = set(marks) - set(seen)
    if missing:
        raise RuntimeError(f"{cmd[:3]}: no line for {missing}:\n{''.join(out[-30:])}")
    return wall, seen, "".join(out)


def running(lab: BenchLab, app: str) -> int:
    return sum(1 for p in lab.kube.pods("drain", label_selector=f"app={app}")
               if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
               and (p.get("spec") or {}).get("nodeName"))


def wait_running(lab: BenchLab, app: str, want: int) -> None:
    wait_until(f"{want} {app} pods Running", lambda: running(lab, app) == want)


def setup(lab: BenchLab, pods: int, delete_delay: float) -> None:
    driver_pool(lab, KERNEL)
    create_nodes(lab.kube, [NodeSpec(n, KERNEL, "ubuntu", "22.04", driver=driver_version_for("580"), gpus=pods,
                                     labels={"gpualign.io/bench": "drain"}) for n in NODES.values()])
    wait_nodes_ready(lab.kube, list(NODES.values()))
    lab.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "drain"}})
    for node in NODES.values():
        lab.kube.apply({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": node, "namespace": "drain"},
            "spec": {"replicas": pods, "selector": {"matchLabels": {"app": node}},
                     "template": {"metadata": {"labels": {"app": node}, "annotations": {
                         "pod-delete.stage.kwok.x-k8s.io/delay": f"{int(delete_delay * 1000)}ms"}},
                         "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{
                             "name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    for node in NODES.values():
        wait_running(lab, node, pods)


def kubectl_run(lab: BenchLab, pods: int) -> dict[str, object]:
    node = NODES["kubectl"]
    mark = lab.audit_mark()
    wall, seen, _ = timed_lines([KUBECTL, "drain", node, "--pod-selector", f"app={node}", "--timeout", "300s"],
                                lab.env, {"cordoned": "cordoned", "drained": "drained"})
    requests = lab.audit_since(mark, "kubectl/")
    subprocess.run([KUBECTL, "uncordon", node], env=lab.env, check=True, capture_output=True)
    wait_running(lab, node, pods)
    return {"whole_s": seen["drained"], "phase_s": seen["drained"] - seen["cordoned"], "command_s": wall,
            "requests": dict(sorted(requests.items()))}


def gpualign_run(lab: BenchLab, pods: int, branch: str) -> dict[str, object]:
    node = NODES["gpualign"]
    mark = lab.audit_mark()
    wall, seen, _ = timed_lines(
        [*GPUALIGN, "upgrade", "--yes", "-l", f"kubernetes.io/hostname={node}", "--to-branch", branch,
         "--ledger", f"registry://{lab.state.registry}/nvidia/driver"], lab.env,
        {"deleting": "→ pod-deletion-required", "gone": "→ pod-restart-required"})
    requests = lab.audit_since(mark, "gpualign-upgrade/")
    wait_running(lab, node, pods)
    return {"whole_s": seen["gone"], "phase_s": seen["gone"] - seen["deleting"], "command_s": wall,
            "requests": dict(sorted(requests.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pod-delete-delay", type=float, default=0.0,
                    help="kwok's delay before an evicted pod is gone (a grace period's stand-in)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/drain.json"))
    args = ap.parse_args()
    runs: dict[str, list[dict[str, object]]] = {"kubectl": [], "gpualign": []}
    with bench_lab("drain") as lab:
        setup(lab, args.pods, args.pod_delete_delay)
        for i in range(args.repeat):
            runs["kubectl"].append(kubectl_run(lab, args.pods))
            runs["gpualign"].append(gpualign_run(lab, args.pods, "595" if i % 2 == 0 else "580"))
            k, g = runs["kubectl"][-1], runs["gpualign"][-1]
            print(f"run {i + 1}: kubectl drain {k['whole_s']:.2f}s (phase {k['phase_s']:.2f}s), gpualign "
                  f"{g['whole_s']:.2f}s (phase {g['phase_s']:.2f}s)", flush=True)
    summary: dict[str, object] = {"pods": args.pods, "pod_delete_delay_s": args.pod_delete_delay}
    for key in ("whole_s", "phase_s"):
        k = median([float(r[key]) for r in runs["kubectl"]])  # type: ignore[arg-type]
        g = median([float(r[key]) for r in runs["gpualign"]])  # type: ignore[arg-type]
        summary[key] = {"kubectl": round(k, 3), "gpualign": round(g, 3), "ratio": round(g / k, 3)}
        print(f"median {key}: kubectl {k:.2f}s, gpualign {g:.2f}s, ratio {g / k:.2f}x", flush=True)
    for tool in runs:
        print(f"{tool} requests (last run): {runs[tool][-1]['requests']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
