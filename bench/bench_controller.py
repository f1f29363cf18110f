"""Benchmark: the controller on a 5,000-GPU-node lab fleet.

- Detection latency: node created (POST returned) → DriverImageMissing Event seen by a watching client, p50/p99,
  over --single nodes added one at a time (--gap seconds apart).
- The controller's RSS and CPU while idle, and during a burst of --burst node additions (16 at a time); the burst's
  own detection latencies are reported too (they measure queueing behind the API server's write rate).
Targets (issue: controller): p99 < 1 s, RSS < 150 MB.

`--archive`: the fleet is Debian 12 and 13 nodes of five kernel lines, the controller runs with `--build` and reads
an archive the bench serves on loopback as Debian's is served (Debian's recorded metapackages, signed by a key of
the bench's own, trusted as apt trusts a signed-by key) every `--archive-poll-seconds`: each pool's next kernel is
judged and handed to the build trigger (its Jobs' pods wait on a node selector nothing matches). Targets: p99 < 1 s,
RSS < 300 MB, at 20,000 nodes.

    .venv/bin/python bench/bench_controller.py --nodes 5000 --single 100 --burst 500
    .venv/bin/python bench/bench_controller.py --nodes 20000 --single 100 --burst 500 --archive \
        --out bench/results/controller-archive-20000.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import httpx2  # noqa: E402

from gpualign.kube.client import Kube  # noqa: E402
from gpualign.lab import cluster  # noqa: E402
from gpualign.lab.processes import free_port  # noqa: E402
from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import node_manifest, push_driver_image, registry_client  # noqa: E402

KERNELS = ["5.15.0-124-generic", "5.15.0-125-generic", "6.8.0-48-generic", "6.8.0-1015-aws", "6.8.0-1017-azure"]
# --archive: Debian pools (kernel, OS version, branch), each one ABI behind what the recorded archive names next
DEBIAN = [("6.1.0-53-amd64", "12"), ("6.1.0-53-cloud-amd64", "12"), ("6.12.117_deb12-amd64", "12"),
          ("6.12.117_deb13-amd64", "13"), ("6.12.117_deb13-cloud-amd64", "13")]
MISSING_KERNEL = "5.15.0-199-generic"
GPUALIGN = [sys.executable, "-m", "gpualign"]
# Benchmark labs have no real node unless one measures it (bench_real_node.py): it is one per machine.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")
TICK = os.sysconf("SC_CLK_TCK")


def proc_sample(pid: int) -> tuple[float, int]:
    """(cpu seconds so far, rss bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def create(kube: Kube, names: list[str], kernel_of, stamps: dict[str, float] | None = None) -> None:
    def one(name: str) -> None:
        kernel = kernel_of(name)
        debian = next((v for k, v in DEBIAN if k == kernel), None)
        spec = NodeSpec(name, kernel, "debian", debian, driver="550.163.01") if debian else \
            NodeSpec(name, kernel, "ubuntu", "22.04", driver="580.173.02")
        resp = kube.request("POST", "/api/v1/nodes", body=node_manifest(spec))
        if resp.status_code != 201:
            raise RuntimeError(f"{name}: {resp.status_code} {resp.text[:200]}")
        if stamps is not None:
            stamps[name] = time.monotonic()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))


def metric(port: int, name: str) -> float | None:
    import re

    try:
        text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx2.HTTPError:
        return None
    m = re.search(rf"(?m)^{name} ([0-9.e+-]+)", text)
    return float(m.group(1)) if m else None


@dataclass
class Fleet:
    """A lab of N kwok GPU nodes (images present for every kernel) with the controller running and synced."""

    state: cluster.LabState
    kube: Kube
    ctl: subprocess.Popen[bytes]
    synced_s: float  # controller start -> every node counted
    port: int  # its /metrics


@contextlib.contextmanager
def fleet_with_controller(prefix: str, nodes: int, archive_every: float | None = None) -> Iterator[Fleet]:
    """`lab up --scenario empty`, the driver images of KERNELS pushed, `nodes` GPU nodes, then the controller
    (`--no-leader-elect`, ledger re-read every 30 s) started and waited on; all of it torn down at the end.
    archive_every: a Debian fleet, and the controller building ahead from an archive served here."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    env = dict(os.environ, GPUALIGN_LAB_DIR=str(work / "lab"))
    subprocess.run([*GPUALIGN, "lab", "up", "--scenario", "empty"], env=env, check=True)
    ctl = None
    stack = contextlib.ExitStack()
    try:
        state = cluster.LabState.load(work / "lab")
        assert state is not None
        env["KUBECONFIG"] = str(state.kubeconfig)
        kube = Kube(str(state.kubeconfig))
        reg = registry_client(state.registry)
        for k in KERNELS:
            push_driver_image(reg, f"580-{k}-ubuntu22.04", "580.173.02")
        for k, version in DEBIAN if archive_every else ():  # Debian 12 nodes on 535, Debian 13 on 550 (_branches)
            branch = "535" if version == "12" else "550"
            push_driver_image(reg, f"{branch}-{k}-debian{version}", f"{branch}.00.01")
        reg.close()
        fleet_kernels = [k for k, _ in DEBIAN] if archive_every else KERNELS
        t0 = time.perf_counter()
        create(kube, [f"fleet-{i:05d}" for i in range(nodes)],
               lambda n: fleet_kernels[int(n[6:]) % len(fleet_kernels)])
        print(f"created {nodes} nodes in {time.perf_counter() - t0:.1f}s", flush=True)
        port = free_port()
        log = open(work / "controller.log", "w")  # noqa: SIM115
        extra: list[str] = []
        if archive_every:
            extra = stack.enter_context(_archive(work, kube, env, archive_every))
        started = time.perf_counter()
        ctl = subprocess.Popen([*GPUALIGN, "controller", "--ledger", f"registry://{state.registry}/nvidia/driver",
                                "--listen", f"127.0.0.1:{port}", "--no-leader-elect", "--ledger-refresh", "30",
                                *(["--branch-policy", str(_branches(work))] if archive_every else
                                  ["--driver-branch", "580"]), *extra],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
        while metric(port, "gpualign_gpu_nodes") != nodes:
            if ctl.poll() is not None:
                raise SystemExit(f"bench_controller: the controller exited ({ctl.returncode}): "
                                 f"{(work / 'controller.log').read_text()[-800:]}")
            time.sleep(0.2)
        yield Fleet(state, kube, ctl, time.perf_counter() - started, port)
    finally:
        if ctl is not None:
            ctl.terminate()
            ctl.wait(timeout=20)
        stack.close()
        subprocess.run([*GPUALIGN, "lab", "down"], env=env)


def _branches(work: Path) -> Path:
    """Debian 12 nodes on 535 and Debian 13 nodes on 550 (what each release builds), every other node on 580."""
    path = work / "branches.yaml"
    path.write_text("pools:\n- selector: feature.node.kubernetes.io/system-os_release.VERSION_ID=12\n"
                    "  branch: '535'\n- selector: feature.node.kubernetes.io/system-os_release.VERSION_ID=13\n"
                    "  branch: '550'\n- selector: ''\n  branch: '580'\n")
    return path


@contextlib.contextmanager
def _archive(work: Path, kube: Kube, env: dict[str, str], every: float) -> Iterator[list[str]]:
    """Debian's recorded metapackages served on loopback as a signed archive; the controller's flags and environment
    to build ahead from it (a build namespace whose Jobs' pods wait on a node selector nothing matches)."""
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.local_suite import LocalArchive

    with LocalArchive(work / "archive") as archive:
        for release in ("bookworm", "trixie"):
            archive.publish_recorded(release, "amd64")

        class Quiet(SimpleHTTPRequestHandler):
            def __init__(self, *a, **k) -> None:  # noqa: ANN002, ANN003
                super().__init__(*a, directory=str(archive.root), **k)

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ns = "gpualign-bench-builds"
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "privileged"}}})
        kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpualign-builder",
                                                                             "namespace": ns}})
        settings = work / "build-pods.json"
        settings.write_text(json.dumps({"nodeSelector": {"gpualign.io/no-such-node": "true"}}))
        env.update(archive.env(f"http://127.0.0.1:{server.server_address[1]}"))
        env["GPUALIGN_CACHE"] = str(work / "cache")
        try:
            yield ["--build", "--build-image", "127.0.0.1:1/gpualign:bench", "--build-namespace", ns,
                   "--build-pod-settings", str(settings), "--max-concurrent-builds", "2",
                   "--archive-poll-seconds", str(every)]
        finally:
            server.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--gap", type=float, default=0.3)
    ap.add_argument("--idle-seconds", type=float, default=20)
    ap.add_argument("--archive", action="store_true",
                    help="a Debian fleet, the controller building ahead from an archive served here")
    ap.add_argument("--archive-poll-seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path("bench/results/controller.json"))
    args = ap.parse_args()
    with fleet_with_controller("gpualign-bench-ctl-", args.nodes,
                               args.archive_poll_seconds if args.archive else None) as fleet:
        state, kube, ctl = fleet.state, fleet.kube, fleet.ctl
        started = time.perf_counter() - fleet.synced_s
        # the first pass annotates every node once (status present); wait until that settles
        while True:
            c1, _ = proc_sample(ctl.pid)
            time.sleep(2)
            c2, _ = proc_sample(ctl.pid)
            if c2 - c1 < 0.1:
                break
        print(f"controller synced and settled {args.nodes} nodes in {time.perf_counter() - started:.1f}s",
              flush=True)

        cpu0, _ = proc_sample(ctl.pid)
        rss_idle = []
        for _ in range(int(args.idle_seconds)):
            rss_idle.append(proc_sample(ctl.pid)[1])
            time.sleep(1)
        cpu1, _ = proc_sample(ctl.pid)
        idle_cpu_pct = 100 * (cpu1 - cpu0) / args.idle_seconds

        seen: dict[str, float] = {}
        watcher_kube = Kube(str(state.kubeconfig))
        listing = watcher_kube.get_json("/api/v1/namespaces/default/events")
        rv = listing["metadata"]["resourceVersion"]
        done = threading.Event()

        def watch_events() -> None:
            nonlocal rv
            while not done.is_set():
                for kind, obj in watcher_kube.watch_raw("/api/v1/namespaces/default/events", resource_version=rv,
                                                        timeout_seconds=5):
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if kind == "ADDED" and obj.get("reason") == "DriverImageMissing":
                        seen.setdefault(obj["involvedObject"]["name"], time.monotonic())

        threading.Thread(target=watch_events, daemon=True).start()
        single_stamps: dict[str, float] = {}
        for i in range(args.single):
            create(kube, [f"single-{i:04d}"], lambda _n: MISSING_KERNEL, single_stamps)
            time.sleep(args.gap)
        deadline = time.monotonic() + 30
        while sum(1 for n in single_stamps if n in seen) < args.single and time.monotonic() < deadline:
            time.sleep(0.1)
        single = sorted(seen[n] - single_stamps[n] for n in single_stamps if n in seen)
        sq = statistics.quantiles(single, n=100)
        print(f"single additions: p50 {sq[49]:.3f}s p99 {sq[98]:.3f}s max {single[-1]:.3f}s", flush=True)
        stamps: dict[str, float] = {}
        rss_burst: list[int] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                rss_burst.append(proc_sample(ctl.pid)[1])
                time.sleep(0.2)

        threading.Thread(target=sample, daemon=True).start()
        names = [f"burst-{i:04d}" for i in range(args.burst)]
        cpu2, _ = proc_sample(ctl.pid)
        t_burst = time.monotonic()
        create(kube, names, lambda _n: MISSING_KERNEL, stamps)
        deadline = time.monotonic() + 60
        while sum(1 for n in names if n in seen) < args.burst and time.monotonic() < deadline:
            time.sleep(0.1)
        burst_wall = time.monotonic() - t_burst
        cpu3, _ = proc_sample(ctl.pid)
        sampling.set()
        done.set()
        latencies = sorted(seen[n] - stamps[n] for n in names if n in seen)
        q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
        result = {
            "nodes": args.nodes, "single_additions": args.single, "single_gap_s": args.gap,
            "latency_p50_s": round(sq[49], 3), "latency_p99_s": round(sq[98], 3),
            "latency_max_s": round(single[-1], 3), "single_events_seen": len(single),
            "burst": args.burst, "burst_events_seen": len(latencies),
            "burst_latency_p50_s": round(q[49], 3), "burst_latency_p99_s": round(q[98], 3),
            "burst_latency_max_s": round(latencies[-1], 3) if latencies else None,
            "idle_rss_mib": round(max(rss_idle) / 2**20, 1), "idle_cpu_percent": round(idle_cpu_pct, 2),
            "burst_peak_rss_mib": round(max(rss_burst) / 2**20, 1),
            "burst_cpu_seconds": round(cpu3 - cpu2, 2), "burst_wall_seconds": round(burst_wall, 2),
        }
        if args.archive:  # what the archive's read made of the fleet: Jobs ahead, and nodes held from rebooting
            text = httpx2.get(f"http://127.0.0.1:{fleet.port}/metrics", timeout=10).text
            result["archive_held_nodes"] = text.count("gpualign_archive_kernel_driver_image_missing{")
            result["archive_not_buildable"] = text.count("gpualign_archive_kernel_not_buildable{")
            result["build_jobs_ahead"] = len(kube.list_raw("/apis/batch/v1/namespaces/gpualign-bench-builds/jobs"))
        print(json.dumps(result, indent=2), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
