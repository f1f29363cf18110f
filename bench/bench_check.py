"""Benchmark: `gpualign check`, `status` and `why` against kubectl and against the floor, on N kwok GPU nodes, and
`check` on an N-node dump. Each side runs as a whole command, alternating, in the same run on the same lab; medians.

The floors are the least any client could spend for the same answer: the LISTs the command makes, fetched by curl
unpaged and thrown away (check: GPU nodes as metadata only and the driver pods; status: whole GPU nodes, the driver
pods and DaemonSets; why: the same for one node). A dump's floor is reading the file: Python starting and orjson
parsing it. The target (issue: check at the speed of the wire) is every gpualign row <= 1.5x its floor, at 1,000,
5,000 and 20,000 nodes; peak RSS grows linearly.

    .venv/bin/python bench/bench_check.py --nodes 1000 5000 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.kube.client import METADATA_ONLY, Kube  # noqa: E402
from gpualign.lab import cluster, versions  # noqa: E402
from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import node_manifest, push_driver_image, registry_client  # noqa: E402

KERNELS = ["5.15.0-124-generic", "5.15.0-125-generic", "6.8.0-48-generic", "6.8.0-1015-aws", "6.8.0-1017-azure"]
GPUALIGN = [sys.executable, "-m", "gpualign"]
# Benchmark labs have no real node unless one measures it (bench_real_node.py): it is one per machine.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")


def create_nodes(kube: Kube, start: int, count: int, *, managed: bool = True) -> None:
    """managed: kwok takes the nodes (Ready, a Lease each renewed every few seconds: a busy API server); else no
    component renews them (with pause_writers: an API server that is not busy)."""
    def one(i: int) -> None:
        spec = NodeSpec(f"bench-{i:05d}", KERNELS[i % len(KERNELS)], "ubuntu", "22.04", driver="580.173.02",
                        labels={"gpualign.io/bench": "true"})
        body = node_manifest(spec)
        if not managed:
            del body["metadata"]["annotations"]["kwok.x-k8s.io/node"]
        resp = kube.request("POST", "/api/v1/nodes", body=body)
        if resp.status_code not in (201, 409):
            raise RuntimeError(f"node create failed: {resp.status_code} {resp.text[:200]}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(start, start + count)))


SERVER_PIDS: list[int] = []  # the lab's API server and etcd, whose CPU each run is charged with


def server_cpu() -> float:
    """CPU seconds the API server and etcd have spent so far (user and system, from /proc: 10 ms ticks)."""
    ticks = 0
    for pid in SERVER_PIDS:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime: the stat line's 14th and 15th fields
    return ticks / os.sysconf("SC_CLK_TCK")


def create_driver_pods(kube: Kube, start: int, count: int, registry: str) -> None:
    """A driver pod on each of these nodes, as the GPU Operator's DaemonSet makes them, bound to its node and
    Running and Ready (its status written as a kubelet writes it): the driver pods' LIST is then a fleet's."""
    from gpualign.base import labels as L

    def one(i: int) -> None:
        node, kernel = f"bench-{i:05d}", KERNELS[i % len(KERNELS)]
        name = f"nvidia-driver-daemonset-{i:05d}"
        image = f"{registry}/nvidia/driver:580-{kernel}-ubuntu22.04"
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default",
                             "labels": {L.DRIVER_COMPONENT: L.DRIVER_COMPONENT_VALUE, "app": "nvidia-driver-daemonset",
                                        "gpualign.io/bench": "true"}},
                "spec": {"nodeName": node, "hostPID": True, "priorityClassName": "system-node-critical",
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "containers": [{"name": "nvidia-driver-ctr", "image": image,
                                         "securityContext": {"privileged": True},
                                         "volumeMounts": [{"name": "run-nvidia", "mountPath": "/run/nvidia"}]}],
                         "volumes": [{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia"}}]}}
        resp = kube.request("POST", "/api/v1/namespaces/default/pods", body=body)
        if resp.status_code not in (201, 409):
            raise RuntimeError(f"pod create failed: {resp.status_code} {resp.text[:200]}")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.0.0.1", "startTime": now,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "nvidia-driver-ctr", "image": image, "imageID": f"{image}@sha256:{'0' * 64}",
                                   "ready": True, "restartCount": 0, "started": True,
                                   "containerID": f"containerd://{i:064d}",
                                   "state": {"running": {"startedAt": now}}}]}}
        resp = kube.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/status", body=status,
                            content_type="application/merge-patch+json")
        if resp.status_code != 200:
            raise RuntimeError(f"pod status failed: {resp.status_code} {resp.text[:200]}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(start, start + count)))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, float, float]:
    """Wall seconds, exit code, CPU seconds (user and system, the command's whole tree) and the server's CPU
    seconds meanwhile, of one whole command."""
    import resource

    before, server_before = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    after, server_after = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed: {proc.stderr.decode()[-300:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, proc.returncode, cpu, server_after - server_before


def peak_rss_kib(cmd: list[str], env: dict[str, str]) -> int:
    """Peak RSS of this one command alone, from GNU time (the largest process of its tree)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    return int(proc.stderr.strip().splitlines()[-1])


def measure(label: str, pairs: dict[str, list[str]], env: dict[str, str], repeat: int) -> dict[str, object]:
    """pairs: gpualign's command first, then what it is compared with: kubectl, the floor (curl), the Python
    floor; each ratio is gpualign's median over theirs."""
    times: dict[str, list[float]] = {k: [] for k in pairs}
    cpus: dict[str, list[float]] = {k: [] for k in pairs}
    servers: dict[str, list[float]] = {k: [] for k in pairs}
    for _ in range(repeat):  # alternate, so drift hits both sides alike
        for name, cmd in pairs.items():
            wall, _, cpu, server = timed(cmd, env)
            times[name].append(wall)
            cpus[name].append(cpu)
            servers[name].append(server)
    med = {k: statistics.median(v) for k, v in times.items()}
    names = list(pairs)
    line = f"{label:<34} " + "  ".join(f"{k} {med[k]:.3f}s" for k in names)
    cpu_med = {k: round(statistics.median(v), 3) for k, v in cpus.items()}
    server_med = {k: round(statistics.median(v), 3) for k, v in servers.items()}
    result: dict[str, object] = {"case": label, "median_s": med, "runs": times, "cpu_median_s": cpu_med,
                                 "server_cpu_median_s": server_med}
    for key, name, shown in (("ratio", "kubectl", "kubectl"), ("over_floor", "floor", "floor"),
                             ("over_python_floor", "python floor (", "python floor"),
                             ("over_cli_floor", "python floor with typer", "python floor with typer"),
                             ("over_before", "gpualign before", "gpualign before")):
        other = next((k for k in names[1:] if k.startswith(name)), None)
        if other is not None:
            result[key] = round(med[names[0]] / med[other], 3)
            line += f"  over {shown} {result[key]:.2f}x"
    line += "  (CPU, client/server: " + ", ".join(f"{k} {cpu_med[k]:.2f}/{server_med[k]:.2f}s" for k in names) + ")"
    print(line, flush=True)
    return result


def _tls(kubeconfig: Path) -> tuple[str, str, str, str]:
    """The lab's CA, client certificate and key files, and the API server's URL."""
    from gpualign.kube.kubeconfig import merge

    conf = merge([kubeconfig]).config
    cluster, user = conf["clusters"][0]["cluster"], conf["users"][0]["user"]
    return cluster["certificate-authority"], user["client-certificate"], user["client-key"], cluster["server"]


def _curl(kubeconfig: Path) -> tuple[list[str], str]:
    """curl and its options for one URL; after `--next`, pass `curl[1:]` (the options alone: curl would read a
    second "curl" as a URL to fetch)."""
    ca, cert, key, server = _tls(kubeconfig)
    return ["curl", "-sS", "--fail", "--cacert", ca, "--cert", cert, "--key", key, "-o", "/dev/null"], server


def python_floor(kubeconfig: Path, paths: list[str], accept: str | None = None, *, cli: bool = False) -> list[str]:
    """bench/python_floor.py fetching the same URLs: the least a Python command can spend on them; with `cli`, the
    least a command of gpualign's making can (its CLI framework imported, the nodes' labels decoded)."""
    ca, cert, key, server = _tls(kubeconfig)
    return [sys.executable, *([] if cli else ["-S"]), str(Path(__file__).with_name("python_floor.py")), ca, cert,
            key, *(f"{server}{path}" for path in paths), *(["--accept", accept] if accept else []),
            *(["--cli"] if cli else [])]


def check_paths() -> list[str]:
    from gpualign.base import labels as L

    return [f"/api/v1/nodes?labelSelector={L.GPU_PRESENT}%3Dtrue",
            f"/api/v1/pods?labelSelector={L.DRIVER_COMPONENT}%3D{L.DRIVER_COMPONENT_VALUE}"]


def why_paths(node: str) -> list[str]:
    from urllib.parse import quote

    from gpualign.upgrade.snapshot import DRIVER_SELECTOR, target_selector

    return [f"/api/v1/nodes?labelSelector={quote(target_selector(f'kubernetes.io/hostname={node}'))}",
            f"/api/v1/pods?labelSelector={quote(DRIVER_SELECTOR)}",
            f"/apis/apps/v1/daemonsets?labelSelector={quote(DRIVER_SELECTOR)}"]


def floor_command(kubeconfig: Path) -> list[str]:
    """curl fetching the two LISTs check makes (GPU nodes as metadata only, driver pods in full), unpaged: the
    least any client could do for the same answer."""
    from gpualign.base import labels as L
    from gpualign.kube.client import METADATA_ONLY

    curl, server = _curl(kubeconfig)
    return [*curl, "-H", f"Accept: {METADATA_ONLY}", f"{server}/api/v1/nodes?labelSelector={L.GPU_PRESENT}%3Dtrue",
            "--next", *curl[1:],
            f"{server}/api/v1/pods?labelSelector={L.DRIVER_COMPONENT}%3D{L.DRIVER_COMPONENT_VALUE}"]


def status_floor_command(kubeconfig: Path) -> list[str]:
    """curl fetching the LISTs status makes: the GPU nodes its walk targets (whole: it reads their Ready condition
    and cordon), the driver pods and the driver DaemonSets, unpaged."""
    from urllib.parse import quote

    from gpualign.upgrade.snapshot import DRIVER_SELECTOR, target_selector

    curl, server = _curl(kubeconfig)
    return [*curl, f"{server}/api/v1/nodes?labelSelector={quote(target_selector(None))}",
            "--next", *curl[1:], f"{server}/api/v1/pods?labelSelector={quote(DRIVER_SELECTOR)}",
            "--next", *curl[1:], f"{server}/apis/apps/v1/daemonsets?labelSelector={quote(DRIVER_SELECTOR)}"]


def why_floor_command(kubeconfig: Path, node: str) -> list[str]:
    """curl fetching the LISTs why makes for one node: that node (by its hostname label), the driver pods and the
    driver DaemonSets, unpaged."""
    from urllib.parse import quote

    from gpualign.upgrade.snapshot import DRIVER_SELECTOR, target_selector

    curl, server = _curl(kubeconfig)
    return [*curl, f"{server}/api/v1/nodes?labelSelector={quote(target_selector(f'kubernetes.io/hostname={node}'))}",
            "--next", *curl[1:], f"{server}/api/v1/pods?labelSelector={quote(DRIVER_SELECTOR)}",
            "--next", *curl[1:], f"{server}/apis/apps/v1/daemonsets?labelSelector={quote(DRIVER_SELECTOR)}"]


def dump_floor_command(dump: Path) -> list[str]:
    """Reading a dump at all: Python starting and orjson parsing the file."""
    return [sys.executable, "-c", "import sys, orjson; orjson.loads(open(sys.argv[1], 'rb').read())", str(dump)]


WRITERS = ("kube-controller-manager", "kube-scheduler", "kwok", "driver-sim")  # what writes to a lab's API server


def pause_writers(state: cluster.LabState, sig: int = signal.SIGSTOP) -> list[str]:
    """An API server that is not busy: every lab process that writes to it (kwok's Lease renewals, the node
    controller's status updates, the scheduler, the driver simulator) stopped (SIGSTOP), or resumed (SIGCONT).
    Nodes nobody renews would otherwise be marked unreachable one by one, rate-limited, for many minutes."""
    done = []
    for name in WRITERS:
        proc = state.procs.get(name)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
                done.append(name)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--idle", action="store_true",
                    help="an API server that is not busy: nodes no kwok renews, the lab's writers paused "
                         "(writes bench/results/check-idle.json)")
    ap.add_argument("--no-kubectl", action="store_true",
                    help="leave kubectl out (at 20,000 nodes it takes ~45 s a run)")
    ap.add_argument("--cases", nargs="+", default=["check", "status", "why", "dump"],
                    choices=["check", "table", "status", "why", "dump"],
                    help="check: -o json; table: check as a person runs it, its table printed (default: all but table)")
    ap.add_argument("--driver-pods", action="store_true",
                    help="a Running driver pod on every GPU node, as under the GPU Operator (the pods' LIST then "
                         "grows with the fleet)")
    ap.add_argument("--before", type=Path, metavar="SRC",
                    help="also time gpualign from another source tree (e.g. a worktree of an older commit's src/), "
                         "alternated with this one, for check and why")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.out = args.out or Path("bench/results/check-idle.json" if args.idle else "bench/results/check.json")
    # Each tree runs from bytecode, as an installed copy does (pip compiles a wheel's modules as it installs them):
    # with PYTHONDONTWRITEBYTECODE set, a checkout would compile every module it imports from source on every run.
    for tree in (Path(__file__).resolve().parent.parent / "src", *([args.before] if args.before else [])):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)

    work = Path(tempfile.mkdtemp(prefix="gpualign-bench-"))
    state_dir = work / "lab"
    env = dict(os.environ, GPUALIGN_LAB_DIR=str(state_dir))
    subprocess.run([*GPUALIGN, "lab", "up", "--scenario", "empty"], env=env, check=True)
    results: list[dict[str, object]] = []
    try:
        state = cluster.LabState.load(state_dir)
        assert state is not None
        env["KUBECONFIG"] = str(state.kubeconfig)
        kubectl = str(versions.default_bin_dir() / "kubectl")
        reg = registry_client(state.registry)
        for k in KERNELS:
            push_driver_image(reg, f"580-{k}-ubuntu22.04", "580.173.02")
        reg.close()
        ledger = f"registry://{state.registry}/nvidia/driver"
        kube = Kube(str(state.kubeconfig))
        SERVER_PIDS[:] = [state.procs[name].pid for name in ("kube-apiserver", "etcd") if name in state.procs]
        if args.idle:
            print(f"paused: {', '.join(pause_writers(state))}", flush=True)
        have = 0
        for n in sorted(args.nodes):
            t0 = time.perf_counter()
            create_nodes(kube, have, n - have, managed=not args.idle)
            if args.driver_pods:
                create_driver_pods(kube, have, n - have, state.registry)
            print(f"created {n - have} nodes in {time.perf_counter() - t0:.1f}s (fleet: {n})", flush=True)
            if args.idle:
                time.sleep(3)  # what the node's creation queued settles
            have = n
            check = [*GPUALIGN, "check", "--ledger", ledger, "--driver-branch", "580", "-o", "json"]
            status = [*GPUALIGN, "status", "-o", "json"]
            kc = state.kubeconfig
            with_kubectl = {} if args.no_kubectl else {"kubectl": [kubectl, "get", "nodes", "-o", "json"]}
            before = ["env", f"PYTHONPATH={args.before}", *GPUALIGN] if args.before else None
            if "check" in args.cases:
                results.append(measure(f"check, cluster, {n} GPU nodes", {
                    "gpualign": check, **with_kubectl,
                    **({"gpualign before": [*before, *check[len(GPUALIGN):]]} if before else {}),
                    "floor (curl, 2 LISTs)": floor_command(kc),
                    "python floor (2 LISTs)": python_floor(kc, check_paths(), METADATA_ONLY),
                }, env, args.repeat))
            if "table" in args.cases:
                table = [arg for arg in check if arg not in ("-o", "json")]
                results.append(measure(f"check (table), cluster, {n} GPU nodes", {
                    "gpualign": table,
                    **({"gpualign before": [*before, *table[len(GPUALIGN):]]} if before else {}),
                    "floor (curl, 2 LISTs)": floor_command(kc),
                    "python floor (2 LISTs)": python_floor(kc, check_paths(), METADATA_ONLY),
                    "python floor with typer, labels decoded": python_floor(kc, check_paths(), METADATA_ONLY,
                                                                            cli=True),
                }, env, args.repeat))
            if "status" in args.cases:
                results.append(measure(f"status, cluster, {n} GPU nodes", {
                    "gpualign": status,
                    **({} if args.no_kubectl else {"kubectl": [kubectl, "get", "nodes", "-l",
                                                               "nvidia.com/gpu.present=true", "-o", "json"]}),
                    "floor (curl, 3 LISTs)": status_floor_command(kc),
                }, env, args.repeat))
            one = f"bench-{n // 2:05d}"
            if "why" in args.cases:
                results.append(measure(f"why, cluster, {n} GPU nodes", {
                    "gpualign": [*GPUALIGN, "why", one, "-o", "json"],
                    **({} if args.no_kubectl else {"kubectl": [kubectl, "get", "node", one, "-o", "json"]}),
                    **({"gpualign before": [*before, "why", one, "-o", "json"]} if before else {}),
                    "floor (curl, 3 LISTs)": why_floor_command(kc, one),
                    "python floor (3 LISTs)": python_floor(kc, why_paths(one)),
                }, env, args.repeat))
            if "dump" not in args.cases:
                continue
            dump = work / f"nodes-{n}.json"
            dump.write_bytes(subprocess.run([kubectl, "get", "nodes", "-o", "json"], env=env, check=True,
                                            capture_output=True).stdout)
            ledger_file = work / "ledger.txt"
            ledger_file.write_text("".join(f"580-{k}-ubuntu22.04\n" for k in KERNELS))
            from_dump = [*GPUALIGN, "check", "--nodes-file", str(dump), "--ledger", str(ledger_file),
                         "--driver-branch", "580", "-o", "json"]
            results.append(measure(f"check, dump, {n} GPU nodes ({dump.stat().st_size >> 20} MiB)", {
                "gpualign": from_dump, **with_kubectl,
                "floor (python + orjson)": dump_floor_command(dump),
            }, env, args.repeat))
            rss = {
                "gpualign check (cluster)": peak_rss_kib(check, env),
                "gpualign status (cluster)": peak_rss_kib(status, env),
                "gpualign check (dump)": peak_rss_kib(from_dump, env),
                **({} if args.no_kubectl else
                   {"kubectl get nodes -o json": peak_rss_kib([kubectl, "get", "nodes", "-o", "json"], env)}),
            }
            results.append({"case": f"peak RSS, {n} nodes", "rss_kib": rss})
            print(f"peak RSS, {n} nodes: " + ", ".join(f"{k} {v / 1024:.0f} MiB" for k, v in rss.items()),
                  flush=True)
        kube.close()
    finally:
        loaded = cluster.LabState.load(state_dir) if state_dir.exists() else None
        if args.idle and loaded is not None:
            pause_writers(loaded, signal.SIGCONT)
        subprocess.run([*GPUALIGN, "lab", "down"], env=env)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
