"""Benchmark: PDB-aware admission against the operator's order, on a fleet where 20 % of the nodes carry a pod of a
saturated PDB (minAvailable = replicas: it allows no disruption, ever).

Five walks of the same fleet (N kwok GPU nodes, P GPU pods each, maxParallelUpgrades M, the same eviction timeout),
each on a fresh lab, in one run:
- baseline: no saturated PDB (the held Deployment's pods move like any other): the whole fleet, PDB-aware;
- pdb-aware: the saturated PDB in place, gpualign's default admission;
- operator: the same, `--admission operator` (by name, as the GPU Operator's upgrade controller and kubectl drain);
- shared: instead, the most common PDB: a service with two replicas on each of the same nodes under
  `maxUnavailable: 1` (no node's pods can all go at once, but one after another they can), PDB-aware;
- shared-operator: the same, `--admission operator`.
Measured:
- wall time until every drainable node (those without a pod of the saturated PDB) is upgrade-done, or "never" when
  the walk ended first;
- node-seconds cordoned while not draining: summed over nodes, the time a node was cordoned by the walk while its
  evictions were refused (its blocker names a PDB refusal) or it had failed, sampled every 0.25 s.
Targets: pdb-aware's cordoned-while-blocked node-seconds = 0, and its drainable nodes finished in <= 1.1x the
baseline's whole walk; in the shared cases every node is drainable and finishes.

    .venv/bin/python bench/bench_admission.py --nodes 20 --pods-per-node 4 --parallel 2
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
from lab_helpers import GPUALIGN, BenchLab, bench_lab, wait_until  # noqa: E402

STATE = "nvidia.com/gpu-driver-upgrade-state"
BLOCKER = "gpualign.io/upgrade-blocker"
DONE = "upgrade-done"


def saturate(lab: BenchLab, held: int, with_pdb: bool) -> set[str]:
    """A Deployment of `held` GPU pods, one per node (anti-affinity), and (with_pdb) a PDB that allows none to go."""
    lab.kube.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "held", "namespace": "bench"},
        "spec": {"replicas": held, "selector": {"matchLabels": {"app": "held"}},
                 "template": {"metadata": {"labels": {"app": "held"}}, "spec": {
                     "nodeSelector": {"gpualign.io/bench": "upgrade"},
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                         {"labelSelector": {"matchLabels": {"app": "held"}},
                          "topologyKey": "kubernetes.io/hostname"}]}},
                     "containers": [{"name": "serve", "image": "nvcr.io/nvidia/tritonserver:25.01-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    if with_pdb:
        lab.kube.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "held-pdb", "namespace": "bench"},
                        "spec": {"minAvailable": held, "selector": {"matchLabels": {"app": "held"}}}})

    def placed() -> bool:
        pods = lab.kube.pods("bench", label_selector="app=held")
        ready = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return len(ready) == held

    wait_until("held pods Running", placed, timeout=120)
    return _settled(lab, "held", held, with_pdb)


CASES = ("baseline", "pdb-aware", "operator", "shared", "shared-operator")
SHARED_SPARE_GPUS = 3  # per node: the service's two replicas, and room for one replacement from another node


def share(lab: BenchLab, nodes: int) -> set[str]:
    """A service of 2 x nodes one-GPU replicas, spread (ScheduleAnyway) over `nodes` nodes labelled
    gpualign.io/shared, under a PDB with maxUnavailable 1. Those nodes are tainted for the service alone (after the
    filler pods are placed), so the filler's replacements never take the room an evicted replica needs: without
    room for a replacement no sequential drain could finish either."""
    names = sorted(n["metadata"]["name"] for n in lab.kube.nodes("gpualign.io/bench=upgrade"))[:nodes]
    for name in names:
        lab.kube.patch_node_labels(name, {"gpualign.io/shared": "true"})
        lab.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": [
            {"key": "gpualign.io/shared", "value": "true", "effect": "NoSchedule"}]}})
    lab.kube.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shared", "namespace": "bench"},
        "spec": {"replicas": 2 * nodes, "selector": {"matchLabels": {"app": "shared"}},
                 "template": {"metadata": {"labels": {"app": "shared"}}, "spec": {
                     "nodeSelector": {"gpualign.io/shared": "true"},
                     "tolerations": [{"key": "gpualign.io/shared", "operator": "Equal", "value": "true",
                                      "effect": "NoSchedule"}],
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": {"app": "shared"}}}],
                     "containers": [{"name": "serve", "image": "nvcr.io/nvidia/tritonserver:25.01-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    lab.kube.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "shared-pdb", "namespace": "bench"},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "shared"}}}})
    wait_until("shared pods Running", lambda: sum(
        1 for p in lab.kube.pods("bench", label_selector="app=shared")
        if (p.get("status") or {}).get("phase") == "Running") == 2 * nodes, timeout=120)
    return _settled(lab, "shared", 2 * nodes, True)


def _settled(lab: BenchLab, app: str, pods: int, with_pdb: bool) -> set[str]:
    if with_pdb:
        wait_until(f"the PDB counting all {pods} pods", lambda: (lab.kube.get(
            f"/apis/policy/v1/namespaces/bench/poddisruptionbudgets/{app}-pdb") or {}).get("status", {}).get(
            "currentHealthy") == pods, timeout=60)
    return {p["spec"]["nodeName"] for p in lab.kube.pods("bench", label_selector=f"app={app}")}


class Sampler:
    """Polls the fleet: when each node became upgrade-done, and node-seconds cordoned while blocked or failed."""

    def __init__(self, lab: BenchLab, interval: float = 0.25) -> None:
        self.lab, self.interval = lab, interval
        self.done_at: dict[str, float] = {}
        self.blocked_node_seconds = 0.0
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._last = self.t0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        self._last = time.perf_counter()
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        last = self._last
        nodes = self.lab.kube.nodes("gpualign.io/bench=upgrade")
        now = time.perf_counter()
        for n in nodes:
            labels, ann = n["metadata"].get("labels") or {}, n["metadata"].get("annotations") or {}
            state = labels.get(STATE, "")
            if state == DONE:
                self.done_at.setdefault(n["metadata"]["name"], now - self.t0)
            cordoned = (n.get("spec") or {}).get("unschedulable")
            refused = "refused" in ann.get(BLOCKER, "")  # an eviction refused (by a PDB) after cordon
            if cordoned and (state == "upgrade-failed" or refused):
                self.blocked_node_seconds += now - last
        self._last = now

    def stop(self) -> None:
        """Stop polling, and read the fleet once more: a node the walk finished after the last poll, just before it
        exited, is counted (at this reading's time, an upper bound)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()


def walk(args: argparse.Namespace, case: str) -> dict[str, object]:
    with bench_lab(f"admission-{case}") as lab:
        shared = case.startswith("shared")
        setup(lab, args.nodes, args.pods_per_node, args.pod_delete_delay, args.driver_delete_delay, args.driver_load,
              spare_gpus=SHARED_SPARE_GPUS if shared else 1)
        for tag in ("595",):
            subprocess.run([*GPUALIGN, "lab", "push-image", f"{tag}-{KERNEL}-ubuntu22.04"], env=lab.env, check=True,
                           capture_output=True)
        held_count = max(1, round(args.nodes * args.held_share))
        held = share(lab, held_count) if shared else saturate(lab, held_count, with_pdb=case != "baseline")
        placement = {n: sum(1 for p in lab.kube.pods("bench", label_selector="app=shared")
                            if p["spec"].get("nodeName") == n) for n in sorted(held)} if shared else {}
        drainable = {n["metadata"]["name"] for n in lab.kube.nodes("gpualign.io/bench=upgrade")} - \
            (held if case in ("pdb-aware", "operator") else set())
        cmd = [*GPUALIGN, "upgrade", "--yes", "-l", "gpualign.io/bench=upgrade", "--to-branch", "595",
               "--ledger", f"registry://{lab.state.registry}/nvidia/driver", "--max-parallel", str(args.parallel),
               "--max-unavailable", "100%", "--eviction-timeout", str(args.eviction_timeout),
               "--admission", "operator" if case.endswith("operator") else "pdb-aware"]
        sampler = Sampler(lab).start()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=lab.env, capture_output=True, text=True, timeout=args.walk_timeout)
        wall = time.perf_counter() - t0
        sampler.stop()
        finished = {n: t for n, t in sampler.done_at.items() if n in drainable}
        all_done = set(finished) == drainable
        row = {"case": case, "nodes": args.nodes,
               "held_nodes": sorted(held) if case in ("pdb-aware", "operator") else [],
               "shared_pdb_replicas_per_node": placement,
               "exit": proc.returncode, "walk_wall_s": round(wall, 2),
               "drainable": len(drainable), "drainable_done": len(finished),
               "drainable_done_s": round(max(finished.values()), 2) if all_done else None,
               "cordoned_while_blocked_node_s": round(sampler.blocked_node_seconds, 1)}
        if case == "baseline":
            row["held_like_nodes_done_s"] = {n: round(t, 2) for n, t in sorted(sampler.done_at.items()) if n in held}
        print(f"{case:>9}: exit {proc.returncode}, walk {wall:.1f}s; drainable {len(finished)}/{len(drainable)} done"
              + (f" after {row['drainable_done_s']}s" if all_done else " (never: the walk ended first)")
              + f"; cordoned while blocked {row['cordoned_while_blocked_node_s']} node-s", flush=True)
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--pods-per-node", type=int, default=4)
    ap.add_argument("--held-share", type=float, default=0.2, help="share of nodes with a saturated PDB's pod")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--eviction-timeout", type=int, default=30)
    ap.add_argument("--pod-delete-delay", type=float, default=1.0)
    ap.add_argument("--driver-delete-delay", type=float, default=0.5)
    ap.add_argument("--driver-load", type=float, default=2.0)
    ap.add_argument("--walk-timeout", type=float, default=1200)
    ap.add_argument("--out", type=Path, default=Path("bench/results/admission.json"))
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES),
                    help="run only these cases (the record is of all five, in one run)")
    args = ap.parse_args()
    rows = {case: walk(args, case) for case in args.cases}

    def field(case: str, key: str) -> object:
        return rows[case][key] if case in rows else None

    base, aware = field("baseline", "drainable_done_s"), field("pdb-aware", "drainable_done_s")
    ratio = round(float(aware) / float(base), 2) if base and aware else None  # type: ignore[arg-type]
    summary = {"pdb_aware_over_baseline": ratio,
               "pdb_aware_cordoned_while_blocked_node_s": field("pdb-aware", "cordoned_while_blocked_node_s"),
               "operator_cordoned_while_blocked_node_s": field("operator", "cordoned_while_blocked_node_s"),
               "shared_pdb_aware_done_s": field("shared", "drainable_done_s"),
               "shared_operator_done_s": field("shared-operator", "drainable_done_s")}
    print(json.dumps(summary), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": list(rows.values()), "summary": summary}, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
