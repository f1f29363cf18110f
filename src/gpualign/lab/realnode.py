"""The lab's real node: kubelet, containerd and runc beside the kwok GPU nodes, for pods that must really run.

The node is named lab-system, labelled `gpualign.io/lab-system=true` and tainted with the same key (NoSchedule), so
only pods that tolerate it (gpualign's controller, its build Jobs, a test's pods) land there. Pods reach the API
server and the registry on 127.0.0.1 with hostNetwork; others get an address on the lab's own isolated bridge (no
gateway, no masquerade: nothing in the lab listens beyond 127.0.0.1, and so the host's ip_forward and NAT tables are
never changed).

Per lab, named by a hash of the state dir: the node's files in `/var/lib/gpualign/node-<hash>` (linked from
`<state dir>/node`; short, because the kubelet and containerd make unix sockets inside and a socket's path is
limited to 104 bytes): the kubelet's root dir, containerd's root, state, runc root and network namespaces
(`netns_mounts_under_state_dir`), the pod logs; containerd's sockets in `/run/gpualign/node-<hash>`; the kubelet's
ports; the pods' cgroup root (`/gpualign-<lab>-<hash>`); the bridge (`gpa-<hash>`) and its CNI network name.

Once per host, so one real node per machine: the kubelet's device-plugin dir (`/var/lib/kubelet/device-plugins`),
the `/var/log/containers` symlinks, the kubelet's iptables chains (`KUBE-FIREWALL`, `KUBE-KUBELET-CANARY`,
`KUBE-IPTABLES-HINT`) and containerd 1.6's shim sockets (`/run/containerd/s`, named by a hash of the address and
container id, so known). The machine's claim on the real node is a file under /run naming the lab that holds it; a
second lab gets no real node (or, when it asked for one, a one-line refusal naming the holder).

Cleanup (`lab down`, and the next `lab up` after a killed lab) removes what the node made: its pods' processes (by
their cgroups), containerd's shims (by the socket they serve), mounts, the node's files, the cgroups, the chains,
the bridge, the log links, the shim sockets, the device-plugin dir when the lab created it, and the claim.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base.errors import LabError
from gpualign.lab import pause, processes
from gpualign.lab import pki as pkimod
from gpualign.lab.processes import Proc

NAME = "lab-system"
LABEL = "gpualign.io/lab-system"
TAINT = {"key": LABEL, "value": "true", "effect": "NoSchedule"}
NAMESPACE = "lab-system"  # the lab's own pods on the real node (its audit log records their status writes)
RUN = Path("/run/gpualign")
NODE_ROOT = Path("/var/lib/gpualign")
CLAIM = RUN / "real-node.json"
SHIM_SOCKETS = Path("/run/containerd/s")
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
CONTAINER_LOGS = Path("/var/log/containers")
CGROUP_FS = Path("/sys/fs/cgroup")
BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables")
CNI_BIN = Path("/usr/lib/cni")
CNI_CACHE = Path("/var/lib/cni/results")  # libcni's, not configurable through containerd 1.6
# The chains kubelet 1.36 makes on start (iptables and ip6tables; filter, nat, mangle). None carries a per-lab name.
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")


@dataclass(frozen=True)
class Paths:
    """Where one lab's real node keeps everything that can be per lab."""

    state_dir: Path

    @property
    def root(self) -> Path:
        """The node's files (kubelet root, containerd, pod logs): a short path, because the kubelet and containerd
        make unix sockets inside, whose paths are limited to 108 bytes; `<state dir>/node` links to it."""
        return NODE_ROOT / f"node-{self._digest}"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def run_dir(self) -> Path:
        """containerd's sockets: a short path, since a unix socket's path has at most 104 bytes here."""
        return RUN / f"node-{self._digest}"

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.containerd_root / "runc"

    def shim_sockets(self) -> list[Path]:
        """The sockets containerd 1.6's shims make under /run/containerd/s, named by a hash of (containerd's
        address, namespace, container id): known from the containers in this lab's runc root."""
        found = []
        for ns_dir in self.runc_root.glob("*") if self.runc_root.is_dir() else []:
            for container in ns_dir.iterdir():
                name = hashlib.sha256(f"{self.socket}/{ns_dir.name}/{container.name}".encode()).hexdigest()
                found.append(SHIM_SOCKETS / name)
        return found

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def bridge(self) -> str:
        """The pods' bridge: per lab (a Linux interface name has at most 15 characters)."""
        return f"gpa-{self._digest}"

    @property
    def network(self) -> str:
        return f"gpualign-{self._digest}"

    @property
    def _digest(self) -> str:
        return hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:8]

    @property
    def cgroup_root(self) -> str:
        return f"/gpualign-{self.state_dir.name}-{self._digest}"


def why_not(state_dir: Path) -> str:
    """Empty when this lab may run the real node; else one line saying why it cannot."""
    if os.geteuid() != 0:
        return "a real node needs root (kubelet and containerd manage cgroups, mounts and namespaces)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    cni = [f"{CNI_BIN}/{x}" for x in ("bridge", "host-local", "loopback") if not (CNI_BIN / x).exists()]
    if missing or cni:
        what = ", ".join(missing + cni)
        return f"a real node needs {what}: run scripts/install-debs (containerd, runc, containernetworking-plugins)"
    holder = claim_holder()
    if holder and Path(holder) != state_dir:
        return f"the lab in {holder} runs this machine's real node (one per machine: kubelet's device-plugin " \
               "socket and iptables chains are host-wide)"
    if holder is None and kubelet_listening():
        return f"another kubelet runs on this machine ({DEVICE_PLUGINS}/kubelet.sock answers)"
    return ""


def kubelet_listening(sock: Path = DEVICE_PLUGINS / "kubelet.sock") -> bool:
    """Whether a kubelet answers on its device-plugin socket. A socket file nothing listens on is a dead kubelet's
    (killed before it could remove it): it is removed, and holds nothing back."""
    if not sock.exists():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(sock))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.unlink(missing_ok=True)
        return False
    except OSError:
        return True  # it exists and may be someone's: not ours to take
    finally:
        probe.close()
    return True


def claim_holder() -> str | None:
    """The state dir of the lab whose real node is up, or None. A claim whose kubelet is dead is stale: its lab is
    cleaned (everything it recorded) and the claim dropped."""
    try:
        data = json.loads(CLAIM.read_text())
    except (OSError, ValueError):
        return None
    kubelet = Proc(**data["kubelet"]) if data.get("kubelet") else None
    containerd = Proc(**data["containerd"]) if data.get("containerd") else None
    if (kubelet and kubelet.alive()) or (containerd and containerd.alive()):
        return str(data["state_dir"])
    cleanup(Path(data["state_dir"]), data)
    return None


def _write_claim(state_dir: Path, record: dict[str, Any]) -> None:
    CLAIM.parent.mkdir(parents=True, exist_ok=True)
    tmp = CLAIM.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"state_dir": str(state_dir), **record}, indent=2) + "\n")
    os.replace(tmp, CLAIM)


def _cni_config(p: Paths) -> dict[str, Any]:
    """Pods that are not hostNetwork get an address on the lab's own bridge, isolated: no gateway, no masquerade,
    so the host's forwarding and NAT tables are never touched (nothing in the lab listens beyond 127.0.0.1)."""
    return {"cniVersion": "1.0.0", "name": p.network, "plugins": [
        {"type": "bridge", "bridge": p.bridge, "isGateway": False, "ipMasq": False, "hairpinMode": False,
         "ipam": {"type": "host-local", "dataDir": str(p.root / "ipam"),
                  "ranges": [[{"subnet": "10.244.0.0/24"}]]}}
    ]}


def _containerd_config(p: Paths, registry: str, cni_conf: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{p.containerd_root / 'root'}"
state = "{p.containerd_root / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{p.socket}"
[ttrpc]
  address = "{p.run_dir / 'containerd.sock.ttrpc'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{p.containerd_root / 'opt'}"
[{cri}]
  sandbox_image = "{pause.IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  Root = "{p.runc_root}"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{cni_conf}"
[{cri}.registry]
  config_path = "{p.containerd_root / 'certs.d'}"
"""


def _kubelet_config(p: Paths, pki: pkimod.Pki, port: int, healthz_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": "127.0.0.1", "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "tlsCertFile": str(pki.kubelet_serving_cert), "tlsPrivateKeyFile": str(pki.kubelet_serving_key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca_cert)}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": p.cgroup_root, "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{p.socket}", "podLogsDir": str(p.pod_logs),
        "registerWithTaints": [TAINT], "serializeImagePulls": False, "resolvConf": "/etc/resolv.conf",
        # The lab's disk is the host's: eviction for disk pressure would evict the lab's own pods at random.
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s", "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "makeIPTablesUtilChains": True, "localStorageCapacityIsolation": True,
    }


def start(state_dir: Path, bins: dict[str, str], apiserver: str, registry: str, pki: pkimod.Pki,
          launch: Callable[[str, list[str], str], Proc], progress: Callable[[str], None]) -> dict[str, Any]:
    """Start containerd and the kubelet; return what cleanup needs (recorded in the lab state and the claim).
    Call only after why_not() returned "" and the API server is ready."""
    p = Paths(state_dir)
    record: dict[str, Any] = {"cgroup_root": p.cgroup_root, "device_plugins_created": not DEVICE_PLUGINS.exists()}
    _write_claim(state_dir, record)
    if p.root.exists():  # left by a lab whose state dir was removed by hand
        _unmount_under(p.root)
        shutil.rmtree(p.root)
    for d in (p.kubelet_root, p.containerd_root, p.pod_logs, p.root / "cni", p.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    (state_dir / "node").symlink_to(p.root)
    (p.root / "cni" / "10-lab.conflist").write_text(json.dumps(_cni_config(p)))
    hosts = p.containerd_root / "certs.d" / registry
    hosts.mkdir(parents=True)
    (hosts / "hosts.toml").write_text(f'server = "http://{registry}"\n[host."http://{registry}"]\n'
                                      '  capabilities = ["pull", "resolve", "push"]\n')
    config = p.containerd_root / "config.toml"
    config.write_text(_containerd_config(p, registry, p.root / "cni"))
    _make_cgroup_root(p.cgroup_root)

    progress("starting the real node: containerd")
    containerd = launch("containerd", [bins["containerd"], "--config", str(config)], f"unix://{p.socket}")
    record["containerd"] = containerd.as_dict()
    _write_claim(state_dir, record)
    processes.wait_until(containerd, lambda: p.socket.is_socket() and _ctr(p, "version").returncode == 0,
                         timeout=30, what="serving")
    imported = _ctr(p, "-n", "k8s.io", "images", "import", "--no-unpack", str(pause.archive()))
    if imported.returncode != 0:
        raise LabError("importing the pause image into the real node's containerd failed",
                       detail=imported.stderr.strip()[-400:])

    port, healthz = processes.free_port(), processes.free_port()
    kcfg = p.kubelet_root / "config.json"
    kcfg.write_text(json.dumps(_kubelet_config(p, pki, port, healthz), indent=2))
    kubeconfig = state_dir / f"kubeconfig-{NODE_CLIENT}"
    progress("starting the real node: kubelet")
    kubelet = launch("kubelet", [
        bins["kubelet"], "--config", str(kcfg), "--kubeconfig", str(kubeconfig), "--root-dir", str(p.kubelet_root),
        "--cert-dir", str(p.kubelet_root / "pki"), "--hostname-override", NAME,
        # kubelet refuses a loopback --node-ip, and the lab listens only on 127.0.0.1: the lab plays the cloud
        # controller instead, setting the node's address to 127.0.0.1 (see initialise), which kubelet then keeps.
        "--cloud-provider", "external", "--node-labels", f"{LABEL}=true", "--v", "1",
    ], f"https://127.0.0.1:{port}")
    record.update(kubelet=kubelet.as_dict(), port=port, healthz_port=healthz)
    _write_claim(state_dir, record)
    return record


NODE_CLIENT = "node-lab-system"


def _ctr(p: Paths, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(p.socket), *args], capture_output=True, text=True, timeout=60)


def _controllers() -> list[Path]:
    """Every cgroup hierarchy mounted on this host (v1 controllers, the v2 unified tree, or both)."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fstype = right.split()[0] if right else ""
            mountpoint = Path(left.split()[4])
            if fstype in ("cgroup", "cgroup2") and mountpoint.is_relative_to(CGROUP_FS):
                found.append(mountpoint)
    return found


def _make_cgroup_root(root: str) -> None:
    for hierarchy in _controllers():
        with contextlib.suppress(OSError):
            (hierarchy / root.lstrip("/")).mkdir(exist_ok=True)


def _cgroup_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in _controllers():
        base = hierarchy / root.lstrip("/")
        if base.is_dir():
            for procs in base.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(x) for x in procs.read_text().split())
    return pids


def processes_where(match: Callable[[list[bytes]], bool]) -> list[int]:
    """The pids whose argv (as /proc has it) matches: how the lab finds what its node started (a process that has
    gone meanwhile is skipped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and match(argv):
            found.append(int(entry.name))
    return found


def _shims(socket: Path) -> list[int]:
    """containerd shims serving this lab's containerd (their argv names its socket): started by the lab."""
    return processes_where(lambda argv: argv[0].endswith(b"containerd-shim-runc-v2") and
                           str(socket).encode() in argv)


def _kill(pids: set[int] | list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                found.append(point)
    return sorted(set(found), key=lambda m: m.count("/"), reverse=True)


def _unmount_under(root: Path) -> None:
    for point in _mounts_under(root) if root.exists() else []:
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)


def leftovers(state_dir: Path, record: dict[str, Any]) -> dict[str, list[str]]:
    """What of the real node is still on the host: empty lists everywhere once cleanup has run."""
    p = Paths(state_dir)
    cgroup_root = record.get("cgroup_root") or p.cgroup_root
    return {
        "mounts": [m for r in (p.root, state_dir) if r.exists() for m in _mounts_under(r)],
        "nodeRoot": [str(p.root)] if p.root.exists() else [],
        "cgroups": [str(h / cgroup_root.lstrip("/")) for h in _controllers() if (h / cgroup_root.lstrip("/")).exists()],
        "processes": sorted(str(x) for x in _cgroup_pids(cgroup_root) | set(_shims(p.socket))),
        "iptables": _chains(),
        "logLinks": [str(x) for x in _log_links(p.root)],
        "bridge": [p.bridge] if _link_exists(p.bridge) else [],
        "shimSockets": [str(x) for x in p.shim_sockets() if x.exists()],
        "runDir": [str(p.run_dir)] if p.run_dir.exists() else [],
        "cniCache": [str(x) for x in CNI_CACHE.glob(f"{p.network}-*")],
    }


def _log_links(root: Path) -> list[Path]:
    prefix = str(root) + "/"
    found = []
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(prefix):
                    found.append(link)
    return found


def _tables() -> list[tuple[str, str]]:
    return [(tool, table) for tool in ("iptables", "ip6tables") if shutil.which(tool)
            for table in ("filter", "nat", "mangle")]


def _chains() -> list[str]:
    found = []
    for tool, table in _tables():
        proc = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "-N" and parts[1] in KUBELET_CHAINS:
                found.append(f"{tool}/{table}/{parts[1]}")
    return found


def _drop_chains() -> None:
    """Delete the kubelet's chains: first every rule that jumps to one, then the chains."""
    for tool, table in _tables():
        rules = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
        for rule in rules:
            parts = rule.split()
            if parts[:1] == ["-A"] and "-j" in parts and parts[parts.index("-j") + 1] in KUBELET_CHAINS \
                    and parts[1] not in KUBELET_CHAINS:
                subprocess.run([tool, "-w", "-t", table, "-D", *parts[1:]], capture_output=True)
        for chain in KUBELET_CHAINS:
            subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True)
            subprocess.run([tool, "-w", "-t", table, "-X", chain], capture_output=True)


def cleanup(state_dir: Path, record: dict[str, Any]) -> None:
    """Remove everything the real node of the lab in state_dir made on the host (its processes first). Safe to
    repeat, and after the lab's processes were killed."""
    p = Paths(state_dir)
    for key in ("kubelet", "containerd"):
        if record.get(key):
            processes.stop(Proc(**record[key]), grace=3.0)
    cgroup_root = record.get("cgroup_root") or p.cgroup_root
    for _ in range(20):  # pods' processes, then the shims that watched them; repeat until none is left
        left = _cgroup_pids(cgroup_root) | set(_shims(p.socket))
        if not left:
            break
        _kill(left)
        time.sleep(0.1)
    for root in (p.root, state_dir):
        _unmount_under(root)
    for hierarchy in _controllers():
        base = hierarchy / cgroup_root.lstrip("/")
        if base.is_dir():
            for d in sorted((x for x in base.rglob("*") if x.is_dir()), key=lambda x: len(x.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                base.rmdir()
    if _claimed_by(state_dir):
        _drop_chains()
        if record.get("device_plugins_created"):
            shutil.rmtree(DEVICE_PLUGINS, ignore_errors=True)
            with contextlib.suppress(OSError):
                DEVICE_PLUGINS.parent.rmdir()
        else:  # the directory was there before; the socket in it is this lab's kubelet's, stopped above
            (DEVICE_PLUGINS / "kubelet.sock").unlink(missing_ok=True)
        CLAIM.unlink(missing_ok=True)
    for link in _log_links(p.root):
        link.unlink(missing_ok=True)
    for sock in p.shim_sockets():
        sock.unlink(missing_ok=True)
    shutil.rmtree(p.run_dir, ignore_errors=True)
    shutil.rmtree(p.root, ignore_errors=True)
    for empty in (SHIM_SOCKETS, SHIM_SOCKETS.parent, RUN, NODE_ROOT):  # left when anything else uses them
        with contextlib.suppress(OSError):
            empty.rmdir()
    for cached in CNI_CACHE.glob(f"{p.network}-*"):
        cached.unlink(missing_ok=True)
    if _link_exists(p.bridge):
        subprocess.run(["ip", "link", "delete", p.bridge], capture_output=True)


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _claimed_by(state_dir: Path) -> bool:
    try:
        return Path(json.loads(CLAIM.read_text())["state_dir"]) == state_dir
    except (OSError, ValueError, KeyError):
        return False


UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"


def initialise(client: Any, url: str) -> None:
    """What a cloud controller does for a new node: its address (127.0.0.1, so the API server reaches the kubelet
    for logs and exec) and the removal of the "uninitialized" taint kubelet registers with."""
    merge = {"Content-Type": "application/merge-patch+json"}
    resp = client.patch(f"{url}/status", headers=merge, content=json.dumps({"status": {"addresses": [
        {"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NAME}]}}))
    if resp.status_code != 200:
        raise LabError(f"setting the real node's address: HTTP {resp.status_code} {resp.text[:200]}")
    taints = [t for t in resp.json().get("spec", {}).get("taints", []) if t.get("key") != UNINITIALIZED]
    resp = client.patch(url, headers=merge, content=json.dumps({"spec": {"taints": taints}}))
    if resp.status_code != 200:
        raise LabError(f"removing the real node's {UNINITIALIZED} taint: HTTP {resp.status_code} {resp.text[:200]}")


def wait_ready(kubelet: Proc, client: Any, apiserver: str, progress: Callable[[str], None]) -> None:
    """Let the API server call the kubelet (logs, exec), make the lab's own namespace, and wait for the node to be
    Ready. client: an admin HTTP client of the API server."""
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "gpualign-lab:apiserver-kubelet-client"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "system:kubelet-api-admin"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": pkimod.CLIENTS["apiserver-kubelet-client"][0]}]}
    for path, body in (("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
                       ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NAMESPACE}})):
        resp = client.post(f"{apiserver}{path}", json=body)
        if resp.status_code not in (201, 409):
            raise LabError(f"creating {body['kind']} for the real node: HTTP {resp.status_code} {resp.text[:200]}")

    started = time.monotonic()
    url = f"{apiserver}/api/v1/nodes/{NAME}"
    processes.wait_until(kubelet, lambda: client.get(url).status_code == 200, timeout=60, what="registered")
    initialise(client, url)

    def ready() -> bool:
        node = client.get(url).json()
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in node.get("status", {}).get("conditions", []))

    processes.wait_until(kubelet, ready, timeout=60, what="Ready")
    progress(f"real node {NAME} Ready in {time.monotonic() - started:.1f}s")
