"""`lab up | down | status | env`: a real control plane as plain processes on 127.0.0.1.

etcd, kube-apiserver (TLS, client certs, service-account keys, Node,RBAC), kube-controller-manager (default
controllers), kube-scheduler, kwok (with the lab's stage file), Debian's docker-registry, and the lab's driver
simulator. Ports are chosen free at start. Everything lives in one state directory; `down` removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from gpualign.base.errors import LabError
from gpualign.lab import docker_registry, processes, realnode, versions
from gpualign.lab import pki as pkimod
from gpualign.lab.processes import Proc

STAGES = Path(__file__).parent / "stages.yaml"
AUDIT_POLICY = Path(__file__).parent / "audit-policy.yaml"
SERVICE_CIDR = "10.96.0.0/16"


def default_state_dir() -> Path:
    if env := os.environ.get("GPUALIGN_LAB_DIR"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpualign" / "lab"


def context_name(state_dir: Path) -> str:
    """The lab's name in its kubeconfigs: gpualign-lab for the default state dir, gpualign-NAME for …/NAME."""
    return f"gpualign-{state_dir.name}"


@dataclass
class LabState:
    """What `up` recorded: enough for `down`, `status`, `env` and the tests to find everything."""

    dir: Path
    bin_dir: str = ""
    apiserver: str = ""
    registry: str = ""
    scenario: str = ""
    started: float = 0.0
    procs: dict[str, Proc] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def file(self) -> Path:
        return self.dir / "state.json"

    def save(self) -> None:
        data = {"bin_dir": self.bin_dir, "apiserver": self.apiserver, "registry": self.registry,
                "scenario": self.scenario, "started": self.started, "extra": self.extra,
                "procs": {k: p.as_dict() for k, p in self.procs.items()}}
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.file)

    @classmethod
    def load(cls, directory: Path) -> LabState | None:
        try:
            data = json.loads((directory / "state.json").read_text())
        except (OSError, ValueError):
            return None
        procs = {k: Proc(**v) for k, v in data.get("procs", {}).items()}
        return cls(dir=directory, bin_dir=data.get("bin_dir", ""), apiserver=data.get("apiserver", ""),
                   registry=data.get("registry", ""), scenario=data.get("scenario", ""),
                   started=data.get("started", 0.0), procs=procs, extra=data.get("extra", {}))

    def running(self) -> dict[str, bool]:
        return {name: p.alive() for name, p in self.procs.items()}


# The order components start in; `down` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "registry",
              "driver-sim", "containerd", "kubelet")


def find_binaries(bin_dir: Path, *, real_node: bool = False) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in versions.ALL_BINARIES + (versions.KUBELET_BINARIES if real_node else ()):
        path = bin_dir / name
        if not os.access(path, os.X_OK):
            raise LabError(f"{name} not found in {bin_dir}: run `gpualign lab build` first")
        found[name] = str(path)
    found["registry"] = docker_registry.binary()
    if real_node:
        found["containerd"] = shutil.which("containerd") or "containerd"  # realnode.why_not checked it is there
    return found


def _tls_client(state: LabState, user: str = "admin") -> httpx2.Client:
    p = pkimod.Pki(state.dir / "pki")
    ctx = ssl.create_default_context(cafile=str(p.ca_cert))
    ctx.load_cert_chain(str(p.client_cert(user)), str(p.client_key(user)))
    return httpx2.Client(verify=ctx, timeout=2.0)


_PLAIN = httpx2.Client(timeout=2.0, verify=False)  # one client for every plain probe, not one per poll


def _http_ok(url: str, client: httpx2.Client | None = None) -> Callable[[], bool]:
    def probe() -> bool:
        return (client or _PLAIN).get(url).status_code == 200

    return probe


def _claim_ports(wanted: dict[str, int]) -> dict[str, int]:
    ports: dict[str, int] = {}
    for role, port in wanted.items():
        if port:
            if processes.port_in_use(port):
                raise LabError(f"port 127.0.0.1:{port} ({role}) is already in use: pick another or use 0 for any")
            ports[role] = port
        else:
            while (p := processes.free_port()) in ports.values():
                pass
            ports[role] = p
    return ports


def _until_serving(proc: Proc, port: int, ready: Callable[[int], Callable[[], bool]], *,
                   again: Callable[[], tuple[Proc, int]] | None, timeout: float, what: str,
                   progress: Callable[[str], None], any_exit: bool = False) -> Proc:
    """Wait until proc itself listens on port and ready(port) holds; the process that serves in the end.

    The port was free when it was chosen, at the start of `up`; a lab starting beside this one can bind it first.
    Its component then answers the probe (so an answer counts only from the process that holds the port), and this
    one exits at start ("address already in use"). `again` starts it once more on a new port and says which;
    None (a port the user chose) keeps the failure. any_exit: any exit at start is worth that one retry."""
    try:
        processes.wait_until(proc, ready(port), timeout=timeout, what=what, port=port)
        return proc
    except processes.ExitedAtStart as exited:
        taken = exited.port_taken
        if again is None or not (any_exit or taken):
            raise
    progress(f"{proc.name}'s port was taken meanwhile; retrying once on a new port" if taken
             else f"{proc.name} exited at start (log: {proc.log}); retrying once on new ports")
    proc, port = again()
    processes.wait_until(proc, ready(port), timeout=timeout, what=what, port=port)
    return proc


def _etcd_argv(bins: dict[str, str], state_dir: Path, ports: dict[str, int]) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports['etcd-client']}", f"http://127.0.0.1:{ports['etcd-peer']}"
    return [bins["etcd"], "--name", "lab", "--data-dir", str(state_dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"lab={peer}", "--unsafe-no-fsync", "--log-level", "info"]


def _apiserver_argv(bins: dict[str, str], state_dir: Path, pki: pkimod.Pki, ports: dict[str, int]) -> list[str]:
    logs = state_dir / "logs"
    return [
        bins["kube-apiserver"], "--etcd-servers", f"http://127.0.0.1:{ports['etcd-client']}",
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
        "--secure-port", str(ports["kube-apiserver"]), "--cert-dir", str(state_dir / "pki"),
        "--tls-cert-file", str(pki.serving_cert), "--tls-private-key-file", str(pki.serving_key),
        "--client-ca-file", str(pki.ca_cert),
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", str(pki.sa_pub),
        "--service-account-signing-key-file", str(pki.sa_key),
        "--authorization-mode", "Node,RBAC", "--service-cluster-ip-range", SERVICE_CIDR,
        "--endpoint-reconciler-type", "none", "--allow-privileged=true", "--v=0",
        "--audit-policy-file", str(AUDIT_POLICY), "--audit-log-path", str(logs / "audit.log"),
        "--audit-log-maxsize", "200",
        # Calls to a kubelet (logs, exec, port-forward) carry this identity and check the kubelet's serving cert.
        "--kubelet-client-certificate", str(pki.client_cert("apiserver-kubelet-client")),
        "--kubelet-client-key", str(pki.client_key("apiserver-kubelet-client")),
        "--kubelet-certificate-authority", str(pki.ca_cert),
        "--kubelet-preferred-address-types", "InternalIP,Hostname",
    ]


def _controller_argv(name: str, bins: dict[str, str], state_dir: Path, pki: pkimod.Pki, port: int) -> list[str]:
    """kube-controller-manager's or kube-scheduler's command line, serving its health on port."""
    kubeconfig = str(state_dir / ("kubeconfig-controller-manager" if name == "kube-controller-manager"
                                  else "kubeconfig-scheduler"))
    common = [bins[name], "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
              "--authorization-kubeconfig", kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
              "--secure-port", str(port)]
    if name == "kube-scheduler":
        return common
    return [*common, "--root-ca-file", str(pki.ca_cert), "--service-account-private-key-file", str(pki.sa_key),
            "--use-service-account-credentials=true", "--controllers", "*", "--node-monitor-grace-period", "60s"]


@dataclass
class _Starting:
    """A lab being started: each component launched on the port chosen for its role, recorded in the state file as
    it starts (so a failure stops exactly what runs), and waited for until it serves on its own port."""

    state: LabState
    bins: dict[str, str]
    ports: dict[str, int]
    pki: pkimod.Pki
    progress: Callable[[str], None]
    chosen: set[str]  # roles whose port the user chose: never moved to another

    def launch(self, name: str, argv: list[str], address: str = "") -> Proc:
        proc = processes.start(name, argv, self.state.dir / "logs" / f"{name}.log", address=address)
        self.state.procs[name] = proc
        self.state.save()
        return proc

    def new_port(self, *roles: str) -> None:
        for role in roles:
            self.ports[role] = processes.free_port()

    def write_kubeconfigs(self) -> None:
        for user in pkimod.CLIENTS:
            path = self.state.dir / ("kubeconfig" if user == "admin" else f"kubeconfig-{user}")
            path.write_text(pkimod.kubeconfig(self.pki, self.state.apiserver, user, context_name(self.state.dir)))
            path.chmod(0o600)

    def _etcd(self) -> tuple[Proc, int]:
        port = self.ports["etcd-client"]
        return self.launch("etcd", _etcd_argv(self.bins, self.state.dir, self.ports), f"http://127.0.0.1:{port}"), port

    def etcd(self) -> None:
        self.progress("starting etcd")

        def on_new_ports() -> tuple[Proc, int]:
            # Seen rarely while another lab runs: etcd stops silently right after start. Its log is kept (appended
            # to), and one fresh attempt on new ports is made before giving up.
            shutil.rmtree(self.state.dir / "etcd", ignore_errors=True)
            self.new_port("etcd-client", "etcd-peer")
            return self._etcd()

        _until_serving(*self._etcd(), lambda port: _http_ok(f"http://127.0.0.1:{port}/health"), again=on_new_ports,
                       any_exit=True, timeout=30, what="healthy", progress=self.progress)

    def _apiserver(self) -> tuple[Proc, int]:
        """Start kube-apiserver on its port, with kubeconfigs naming it."""
        self.state.apiserver = f"https://127.0.0.1:{self.ports['kube-apiserver']}"
        self.write_kubeconfigs()
        argv = _apiserver_argv(self.bins, self.state.dir, self.pki, self.ports)
        return self.launch("kube-apiserver", argv, self.state.apiserver), self.ports["kube-apiserver"]

    def apiserver(self) -> httpx2.Client:
        """Start kube-apiserver; an admin client of it, once it is ready."""
        self.progress("starting kube-apiserver")
        client = _tls_client(self.state)

        def on_new_port() -> tuple[Proc, int]:
            self.new_port("kube-apiserver")
            return self._apiserver()

        _until_serving(*self._apiserver(), lambda port: _http_ok(f"https://127.0.0.1:{port}/readyz", client),
                       again=None if "kube-apiserver" in self.chosen else on_new_port, timeout=60, what="ready",
                       progress=self.progress)
        return client

    def _controller(self, name: str) -> tuple[Proc, int]:
        port = self.ports[name]
        argv = _controller_argv(name, self.bins, self.state.dir, self.pki, port)
        return self.launch(name, argv, f"https://127.0.0.1:{port}"), port

    def _registry(self) -> tuple[Proc, int]:
        port = self.ports["registry"]
        self.state.registry = f"127.0.0.1:{port}"
        reg_dir = self.state.dir / "registry"
        reg_dir.mkdir(exist_ok=True)
        (reg_dir / "config.yml").write_text(docker_registry.config(reg_dir / "data", self.state.registry))
        return self.launch("registry", [self.bins["registry"], "serve", str(reg_dir / "config.yml")],
                           f"http://{self.state.registry}"), port

    def controllers_kwok_and_registry(self) -> Proc:
        """Start kube-controller-manager, kube-scheduler, kwok and the registry side by side, and wait for each; the
        controller manager's process."""
        self.progress("starting kube-controller-manager, kube-scheduler and kwok")
        controllers = {name: self._controller(name) for name in ("kube-controller-manager", "kube-scheduler")}
        kwok = self.launch("kwok", [
            self.bins["kwok"], "--kubeconfig", str(self.state.kubeconfig), "--config", str(STAGES),
            # Only the simulated nodes (seed annotates each): a real node's Lease and pods are its kubelet's alone.
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--node-lease-duration-seconds", "40",
            # no --server-address: kwok's own server (logs, exec and metrics of simulated pods) is unused here, and
            # its port, claimed at the start, could be taken by a lab starting beside this one before kwok bound it
            "--node-ip", "10.0.0.1",
        ])
        registry = self._registry()

        def again(name: str) -> Callable[[], tuple[Proc, int]]:
            def on_new_port() -> tuple[Proc, int]:
                self.new_port(name)
                return self._registry() if name == "registry" else self._controller(name)
            return on_new_port

        with httpx2.Client(verify=False, timeout=2.0) as probe:  # their self-signed serving certificates
            serving = {name: _until_serving(*started, lambda port: _http_ok(f"https://127.0.0.1:{port}/healthz", probe),
                                            again=again(name), timeout=60, what="healthy", progress=self.progress)
                       for name, started in controllers.items()}
        processes.wait_until(kwok, lambda: True, timeout=5, what="running")
        _until_serving(*registry, lambda port: _http_ok(f"http://127.0.0.1:{port}/v2/"),
                       again=None if "registry" in self.chosen else again("registry"), timeout=30, what="serving",
                       progress=self.progress)
        return serving["kube-controller-manager"]

    def driver_simulator(self) -> None:
        self.progress("starting the driver simulator")
        ready = self.state.dir / "driver-sim.ready"
        proc = self.launch("driver-sim", [
            sys.executable, "-m", "gpualign.lab.driver_sim", "--kubeconfig", str(self.state.kubeconfig),
            "--registry", self.state.registry, "--ready-file", str(ready),
        ])
        processes.wait_until(proc, ready.exists, timeout=30, what="watching")


def up(state_dir: Path, bin_dir: Path, *, apiserver_port: int = 0, registry_port: int = 0,
       real_node: bool | None = None, progress: Callable[[str], None] = lambda _m: None) -> LabState:
    """Start every component and wait for each to be healthy. On any failure, stop what was started.

    real_node: True starts the real node (kubelet, containerd) or fails saying why it cannot; None starts it when
    this machine can (root, the Debian packages, no other lab holding it) and says so when not; False never."""
    backoff = os.environ.get("GPUALIGN_LAB_PULL_BACKOFF", "fast")
    if backoff not in ("fast", "kubelet"):  # the driver simulator reads it; said here, before anything starts
        raise LabError(f"GPUALIGN_LAB_PULL_BACKOFF={backoff!r}: the driver simulator's pull back-off is fast or "
                       "kubelet")
    existing = LabState.load(state_dir)
    if existing and existing.procs and all(existing.running().values()):
        progress(f"lab already running (api {existing.apiserver})")
        return existing
    if existing and existing.procs and any(existing.running().values()):
        # Part of it still runs, with its cluster's state: bringing the dead back is the user's choice, not a wipe.
        raise LabError(broken(state_dir, dead_components(existing)))
    if existing and existing.procs:
        progress("a previous lab left processes behind: cleaning up first")
        down(state_dir)
    refusal = realnode.why_not(state_dir) if real_node is not False else "not asked for"
    if refusal and real_node:
        raise LabError(f"no real node for this lab: {refusal}")
    if refusal and real_node is None:
        progress(f"no real node: {refusal}")
    with_node = not refusal
    bins = find_binaries(bin_dir, real_node=with_node)
    ports = _claim_ports({"kube-apiserver": apiserver_port, "registry": registry_port, "etcd-client": 0,
                          "etcd-peer": 0, "kube-controller-manager": 0, "kube-scheduler": 0})
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    state = LabState(dir=state_dir, bin_dir=str(bin_dir), started=time.time(),
                     apiserver=f"https://127.0.0.1:{ports['kube-apiserver']}",
                     registry=f"127.0.0.1:{ports['registry']}")
    started_at = time.monotonic()
    try:
        progress("writing certificates")
        start = _Starting(state, bins, ports, pkimod.create(state_dir / "pki"), progress,
                          chosen={role for role, port in (("kube-apiserver", apiserver_port),
                                                          ("registry", registry_port)) if port})
        start.etcd()
        client = start.apiserver()
        controller_manager = start.controllers_kwok_and_registry()
        start.driver_simulator()

        if with_node:
            state.extra["real_node"] = realnode.start(
                state_dir, bins, state.apiserver, state.registry, start.pki,
                start.launch, progress)
            state.save()
            realnode.wait_ready(state.procs["kubelet"], client, state.apiserver, progress)

        progress("waiting for the default ServiceAccount")
        default_account = f"{state.apiserver}/api/v1/namespaces/default/serviceaccounts/default"
        processes.wait_until(controller_manager, _http_ok(default_account, client), timeout=60,
                             what="creating ServiceAccounts")
        state.extra["up_seconds"] = round(time.monotonic() - started_at, 2)
        state.save()
        return state
    except BaseException:
        for name in reversed(list(state.procs)):
            processes.stop(state.procs[name])
        if "real_node" in state.extra or "containerd" in state.procs:
            realnode.cleanup(state_dir, _node_record(state))
        state.procs.clear()
        state.file.unlink(missing_ok=True)
        raise


def restart(state_dir: Path, name: str, *, pause: float = 0.0) -> Proc:
    """Stop one component and start it again with the same arguments (fault injection for tests, and the way back
    for a component that died)."""
    state = require(state_dir, allow_dead=True)
    if name not in state.procs:
        raise LabError(f"no lab component {name!r}; components: {', '.join(state.procs)}")
    old = state.procs[name]
    processes.stop(old)
    time.sleep(pause)
    proc = processes.start(name, old.argv or [old.exe], Path(old.log), address=old.address, exe=old.exe,
                           env=old.env)
    state.procs[name] = proc
    state.save()
    if name == "kube-apiserver":
        processes.wait_until(proc, _http_ok(f"{state.apiserver}/readyz", _tls_client(state)), timeout=60,
                             what="ready")
    return proc


def down(state_dir: Path) -> list[str]:
    """Stop every recorded process (reverse start order) and remove the state directory."""
    state = LabState.load(state_dir)
    stopped: list[str] = []
    if state:
        for name in reversed(list(state.procs)):
            if processes.stop(state.procs[name]):
                stopped.append(name)
        if "containerd" in state.procs or "real_node" in state.extra:
            realnode.cleanup(state_dir, _node_record(state))
    shutil.rmtree(state_dir, ignore_errors=True)
    return stopped


def _node_record(state: LabState) -> dict[str, Any]:
    """What the real node's cleanup needs: what start() returned, else (a lab killed while starting it) its
    processes as recorded."""
    record = dict(state.extra.get("real_node") or {})
    for name in ("kubelet", "containerd"):
        if name in state.procs:
            record[name] = state.procs[name].as_dict()
    return record


def require(state_dir: Path, *, allow_dead: bool = False) -> LabState:
    """The running lab's state, or a one-line error saying how to start one (or, with a dead component, how to
    bring it back). allow_dead: a lab with dead components is returned as it is (see dead_components)."""
    state = LabState.load(state_dir)
    if not state or not state.procs:
        raise LabError(f"no lab running in {state_dir}: start one with `gpualign lab up`")
    dead = dead_components(state)
    if dead and not allow_dead:
        raise LabError(broken(state_dir, dead))
    return state


def dead_components(state: LabState) -> list[str]:
    return [n for n, ok in state.running().items() if not ok]


def broken(state_dir: Path, dead: list[str]) -> str:
    """One line: which components are dead, and the command that brings them back without losing the lab."""
    again = " && ".join(f"gpualign lab restart {n}" for n in dead)
    return (f"lab in {state_dir} is broken ({', '.join(dead)} not running): `{again}` starts "
            f"{'it' if len(dead) == 1 else 'them'} again and keeps the cluster; `gpualign lab down` then "
            "`gpualign lab up` starts a new one")


def real_node_status(state: LabState) -> dict[str, Any] | None:
    """The real node as `lab status` shows it (None when the lab has none): Ready or not, its pods, its ports."""
    record = state.extra.get("real_node")
    if not record:
        return None
    info: dict[str, Any] = {"name": realnode.NAME, "ready": None, "pods": None, "kubeletPort": record.get("port"),
                            "cgroupRoot": record.get("cgroup_root"), "bridge": realnode.Paths(state.dir).bridge}
    try:
        with _tls_client(state) as client:
            node = client.get(f"{state.apiserver}/api/v1/nodes/{realnode.NAME}").json()
            info["ready"] = any(c.get("type") == "Ready" and c.get("status") == "True"
                                for c in node.get("status", {}).get("conditions", []))
            pods = client.get(f"{state.apiserver}/api/v1/pods",
                              params={"fieldSelector": f"spec.nodeName={realnode.NAME}"}).json()
            info["pods"] = len(pods.get("items", []))
    except (httpx2.HTTPError, ValueError, OSError):
        pass  # the API server is down: status says so through its component line
    return info


def env_lines(state: LabState) -> list[str]:
    """kubectl (and helm, when built) on PATH, the lab's kubeconfig and its registry."""
    helm_dir = Path(state.bin_dir) / versions.HELM_SUBDIR
    path = f"{state.bin_dir}:{helm_dir}" if helm_dir.is_dir() else state.bin_dir
    return [f"export KUBECONFIG={state.kubeconfig}", f"export PATH={path}:$PATH",
            f"export GPUALIGN_LAB_REGISTRY={state.registry}"]
