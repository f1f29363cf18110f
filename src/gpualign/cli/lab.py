"""`gpualign lab …`: build, start, seed, inspect and stop the lab (a real control plane with kwok GPU nodes)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli import complete
from gpualign.cli.common import progress, stdout, warn
from gpualign.cli.groups import Group
from gpualign.cli.options import Output, OutputOpt
from gpualign.cli.printers import Printers, Shown

app = typer.Typer(
    help="The lab: etcd, kube-apiserver, controller-manager, scheduler and kwok as plain processes on 127.0.0.1, "
         "with simulated GPU nodes, a local image registry, a driver simulator, and one real node (kubelet and "
         "containerd, where pods really run).\n\n"
         "Typical use:  gpualign lab build && gpualign lab up && eval \"$(gpualign lab env)\"",
    no_args_is_help=True,
    cls=Group,
)

StateDirOpt = Annotated[Path | None, typer.Option(
    "--state-dir", envvar="GPUALIGN_LAB_DIR", show_envvar=True, metavar="DIR",
    help="where the lab keeps its processes' state, certificates and logs [default: ~/.local/state/gpualign/lab]")]
BinDirOpt = Annotated[Path | None, typer.Option(
    "--bin-dir", envvar="GPUALIGN_LAB_BIN", show_envvar=True, metavar="DIR",
    help="where the built binaries are [default: ~/.cache/gpualign/lab/<versions>/bin]")]


def _dirs(state_dir: Path | None, bin_dir: Path | None) -> tuple[Path, Path]:
    from gpualign.lab import cluster, versions

    return state_dir or cluster.default_state_dir(), bin_dir or versions.default_bin_dir()


@app.command()
def build(
    bin_dir: BinDirOpt = None,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if the binaries are cached")] = False,
    only: Annotated[list[str] | None, typer.Option(
        "--only", metavar="TARGET",
        help="build only this target (repeatable): etcd, kwok, kubernetes, kubelet, gpu-operator, helm, "
             "toxiproxy, cosign, promtool, policy-controller")] = None,
) -> None:
    """Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, etcd, kwok and NVIDIA's GPU
    Operator (with its manifests and CRDs), and the tests' helm, toxiproxy, cosign, Prometheus' promtool and
    policy-controller's policy-tester, from the pinned Go modules into the cache. Skips what is already built. A
    cold build takes 12 to 16 minutes on 2 cores (measured: Kubernetes 3 to 11 min, kubelet 0.5 min after it, etcd 1
    min, kwok 2 min, the GPU Operator 2.5 min; see docs/benchmarks.md); promtool adds its own."""
    from gpualign.lab import build as builder
    from gpualign.lab import versions

    target = bin_dir or versions.default_bin_dir()
    progress(f"Kubernetes {versions.KUBERNETES}, etcd {versions.ETCD}, kwok {versions.KWOK}, GPU Operator "
             f"{versions.GPU_OPERATOR} -> {target}")
    started = time.monotonic()
    timings = builder.build(target, force=force, only=only, progress=progress)
    if timings:
        progress(f"built in {time.monotonic() - started:.0f}s")
    stdout.print(str(target))


@app.command()
def up(
    scenario: Annotated[str, typer.Option(
        "--scenario", "-s", metavar="SCENARIO", autocompletion=complete.scenarios,
        help="fleet to seed: default | empty | operator-clusterpolicy | operator-nvidiadriver | operator-debian "
             "(the operator-* ones run NVIDIA's GPU Operator; see `gpualign lab scenarios`)")] = "default",
    state_dir: StateDirOpt = None,
    bin_dir: BinDirOpt = None,
    apiserver_port: Annotated[int, typer.Option(metavar="PORT", help="kube-apiserver port; 0 picks a free one")] = 0,
    registry_port: Annotated[int, typer.Option(metavar="PORT", help="image registry port; 0 picks a free one")] = 0,
    real_node: Annotated[bool | None, typer.Option(
        "--real-node/--no-real-node", envvar="GPUALIGN_LAB_REAL_NODE", show_envvar=True,
        help="a real kubelet node (lab-system) beside the simulated ones, where pods really run. Default: when "
             "this machine can (root; containerd, runc and the CNI plugins installed; no other lab holding it, as "
             "there is one per machine), else none, saying why. --real-node fails instead")] = None,
) -> None:
    """Start the lab (idempotent) and seed a scenario; returns once nodes are Ready and untainted."""
    from gpualign.lab import actions, cluster, scenarios

    chosen = scenarios.get(scenario)
    sdir, bdir = _dirs(state_dir, bin_dir)
    started = time.monotonic()
    state = cluster.up(sdir, bdir, apiserver_port=apiserver_port, registry_port=registry_port, real_node=real_node,
                       progress=progress)
    if not state.scenario:
        progress(f"seeding scenario {chosen.name!r}: {chosen.description}")
        actions.seed_scenario(state, bdir, chosen, progress)  # nothing half-up: a failed seed stops the lab
        state.scenario = chosen.name
        state.extra["branch"] = chosen.branch
        state.extra["up_seconds_total"] = round(time.monotonic() - started, 2)
        state.save()
    elif state.scenario != chosen.name:
        raise BadInput(f"the lab already runs scenario {state.scenario!r}: `gpualign lab down` first")
    progress(f"lab up in {time.monotonic() - started:.1f}s: api {state.apiserver}, registry {state.registry}")
    progress("use it with:  eval \"$(gpualign lab env)\"")


@app.command("scenarios")
def list_scenarios() -> None:
    """The fleets `lab up --scenario` can seed, with what each holds."""
    from gpualign.cli.table import render
    from gpualign.lab import scenarios

    rows = [[s.name, s.description] for s in scenarios.SCENARIOS.values()]
    sys.stdout.write(render(["SCENARIO", "FLEET"], rows))


@app.command()
def down(state_dir: StateDirOpt = None) -> None:
    """Stop every lab process (by pid) and remove the lab's state. Safe after a crash, and when nothing runs."""
    from gpualign.lab import cluster

    sdir, _ = _dirs(state_dir, None)
    stopped = cluster.down(sdir)
    progress(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def status(state_dir: StateDirOpt = None, output: OutputOpt = Output.table) -> None:
    """What runs, where, and for how long. Exit 1 if the lab is down or any component died."""
    from gpualign.lab import cluster

    LAB_STATUS.refuse_unless_allowed(output)
    sdir, _ = _dirs(state_dir, None)
    state = cluster.LabState.load(sdir)
    if not state or not state.procs:
        LAB_STATUS.print(output, {"stateDir": str(sdir), "running": False, "components": []})
        raise typer.Exit(EXIT_FINDINGS)
    now = time.time()
    alive = state.running()
    LAB_STATUS.print(output, {
        "stateDir": str(sdir), "running": all(alive.values()), "scenario": state.scenario,
        "apiserver": state.apiserver, "registry": state.registry, "realNode": cluster.real_node_status(state),
        "components": [{"name": n, "running": alive[n], "pid": p.pid, "address": p.address or None, "log": str(p.log),
                        "upSeconds": int(now - p.started)} for n, p in state.procs.items()]})
    if not all(alive.values()):
        raise typer.Exit(EXIT_FINDINGS)


def _lab_status_text(document: dict[str, Any], _shown: Shown) -> None:
    """The lab's components, one line each, and its real node."""
    if not document["components"]:
        stdout.print(f"no lab in {document['stateDir']}")
        return
    stdout.print(f"lab in {document['stateDir']} (scenario {document['scenario'] or '-'})")
    for proc in document["components"]:
        age = proc["upSeconds"]
        stdout.print(f"  {proc['name']:<24} {'running' if proc['running'] else 'DEAD':<8} pid {proc['pid']:<8} "
                     f"{proc['address'] or '-':<32} up {age // 3600}h{age % 3600 // 60:02d}m{age % 60:02d}s")
    node = document["realNode"]
    if node:
        ready = {True: "Ready", False: "NOT READY", None: "unknown (API server unreachable)"}[node["ready"]]
        stdout.print(f"  real node {node['name']}: {ready}, {node['pods'] if node['pods'] is not None else '?'} pods, "
                     f"kubelet on 127.0.0.1:{node['kubeletPort']}, cgroups {node['cgroupRoot']}, bridge "
                     f"{node['bridge']}; logs: `gpualign lab logs kubelet|containerd`")
    else:
        stdout.print("  no real node (simulated nodes only): `gpualign lab up --real-node` starts one")


LAB_STATUS = Printers(command="lab status", table=_lab_status_text, wide=False)



@app.command()
def restart(
    component: Annotated[str, typer.Argument(help="etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                                                  "kwok, registry, driver-sim, containerd or kubelet")],
    pause: Annotated[float, typer.Option(metavar="SECONDS", help="seconds to stay down before starting again")] = 0,
    state_dir: StateDirOpt = None,
) -> None:
    """Stop one lab component and start it again with the same arguments: fault injection for tests and demos."""
    from gpualign.lab import cluster

    sdir, _ = _dirs(state_dir, None)
    started = time.monotonic()
    proc = cluster.restart(sdir, component, pause=pause)
    progress(f"{component} restarted (pid {proc.pid}) in {time.monotonic() - started:.1f}s")


@app.command()
def env(state_dir: StateDirOpt = None) -> None:
    """Print `export` lines for the lab: eval "$(gpualign lab env)" then use kubectl. ~/.kube/config is untouched."""
    from gpualign.lab import cluster

    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir, allow_dead=True)
    dead = cluster.dead_components(state)
    if dead:  # the environment is still right: print it, and say on stderr what is dead and how to restart it
        warn(cluster.broken(sdir, dead))
    for line in cluster.env_lines(state):
        print(line)


@app.command("add-node")
def add_node(
    name: Annotated[str, typer.Argument(help="node name")],
    kernel: Annotated[str, typer.Option(metavar="KERNEL", help="kernel-version.full label")] = "5.15.0-124-generic",
    os: Annotated[str, typer.Option("--os", metavar="OS",
                                    help="OS as ID+VERSION_ID, e.g. ubuntu22.04 or rhel9.4")] = "ubuntu22.04",
    driver: Annotated[str | None, typer.Option(metavar="VERSION", help="loaded driver version, e.g. 580.95.05")] = None,
    branch: Annotated[str | None, typer.Option(metavar="BRANCH",
                                               help="driver branch of its pool's DaemonSet [default: lab's]")] = None,
    gpu: Annotated[bool, typer.Option("--gpu/--no-gpu", help="a GPU node (nvidia.com/gpu.present=true)")] = True,
    host_driver: Annotated[bool, typer.Option(
        "--host-driver",
        help="driver installed on the host: nvidia.com/gpu.deploy.driver=false, no driver pod")] = False,
    label: Annotated[list[str] | None, typer.Option("--label", metavar="KEY=VALUE",
                                                    help="extra label KEY=VALUE (repeatable)")] = None,
    secure_boot_cert: Annotated[list[Path] | None, typer.Option(
        "--secure-boot-cert", metavar="FILE",
        help="Secure Boot on, with this certificate (PEM or DER) enrolled in the node's kernel (repeatable): the "
             "driver simulator then refuses modules that are unsigned or signed by another key, as the kernel "
             "does (Debian kernels; annotation lab.gpualign.io/secure-boot-certs)")] = None,
    arch: Annotated[str, typer.Option(
        "--arch", metavar="ARCH", help="its CPU architecture (kubernetes.io/arch): amd64, or arm64 for a Grace "
                                       "node; its driver pod pulls only an image of that platform")] = "amd64",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait until it is Ready")] = True,
    state_dir: StateDirOpt = None,
) -> None:
    """Add a node at runtime, labelled as NFD/GFD would, plus the driver DaemonSet for its kernel+OS pool (in the
    operator scenarios the GPU Operator makes that DaemonSet itself)."""
    import re

    from gpualign.lab import actions, cluster, scenarios
    from gpualign.lab.kernel_load import SECURE_BOOT

    m = re.fullmatch(r"([a-z]+)([0-9][0-9.]*)", os)
    if not m:
        raise BadInput(f"--os {os!r}: expected ID followed by VERSION_ID, e.g. ubuntu22.04")
    extra: dict[str, str] = {"nvidia.com/gpu.deploy.driver": "false"} if host_driver else {}
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--label {item!r}: expected KEY=VALUE")
        extra[key] = value
    if secure_boot_cert:
        from gpualign.base import labels as L

        extra[L.SECURE_BOOT] = "enabled"  # what a fleet publishes for such a node (from mokutil --sb-state)
    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir)
    scenario = scenarios.get(state.scenario) if state.scenario else None
    joined = ""
    if scenario is not None and scenario.operator == "nvidiadriver" and gpu and not host_driver:
        pool, joined = _operator_pool(actions.cluster_pools(state), extra, branch)
        extra.update(pool.node_selector)
    annotations = {SECURE_BOOT: _enrolled_pem(secure_boot_cert)} if secure_boot_cert else {}
    if arch not in ("amd64", "arm64"):
        raise BadInput(f"--arch {arch!r}: expected amd64 or arm64")
    spec = scenarios.NodeSpec(name, kernel, m.group(1), m.group(2), driver=driver, gpu=gpu, arch=arch, labels=extra,
                              annotations=annotations)
    operator_run = scenario is not None and scenario.operator is not None
    try:
        actions.add_node(state, spec, branch=branch or state.extra.get("branch", "580"),
                         same_branch_as=branch if branch and not operator_run and gpu and not host_driver else None,
                         driver_pool=not operator_run, wait=wait)
    except actions.BranchConflict as err:
        raise BadInput(f"--branch {branch}: pool {err.pool}'s driver DaemonSet deploys branch {err.deployed} to every "
                       f"node of the pool; move them all with `gpualign upgrade --to-branch {branch}`, or omit "
                       "--branch") from None
    progress(f"node {name} added (kernel {kernel}, {os}{', ' + arch if arch != 'amd64' else ''}){joined}")


def _operator_pool(pools: list[Any], labels: dict[str, str], branch: str | None) -> tuple[Any, str]:
    """The NVIDIADriver the new node joins: the one its labels select, else the only one there is (its selector's
    labels are added, as a fleet's node pool would carry them); several and none selected, or a --branch the
    operator would not deploy there, is refused in one line."""
    chosen = [p for p in pools if all(labels.get(k) == v for k, v in p.node_selector.items())]
    joined = ""
    if not chosen:
        if len(pools) != 1:
            raise BadInput("the node would join no NVIDIADriver, so the GPU Operator would deploy no driver there: "
                           "pass --label for one of " + "; ".join(
                               f"{p.name} ({','.join(f'{k}={v}' for k, v in p.node_selector.items())})"
                               for p in pools))
        chosen = list(pools)
        joined = (f", labelled {','.join(f'{k}={v}' for k, v in chosen[0].node_selector.items())} to join "
                  f"NVIDIADriver {chosen[0].name}")
    pool = chosen[0]
    if branch and branch != pool.branch:
        raise BadInput(f"--branch {branch}: the node joins NVIDIADriver {pool.name}, which deploys branch "
                       f"{pool.branch}; the GPU Operator makes its DaemonSets (change the NVIDIADriver instead)")
    return pool, joined


def _enrolled_pem(files: list[Path]) -> str:
    """The certificates as one PEM bundle (BadInput naming a file that is not one)."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from gpualign.judging.modsig import load_certs

    out = []
    for path in files:
        try:
            certs = load_certs(path.read_bytes())
        except OSError as err:
            raise BadInput(f"--secure-boot-cert {path}: {err.strerror}") from None
        except ValueError:
            raise BadInput(f"--secure-boot-cert {path}: not an X.509 certificate (PEM or DER)") from None
        out += [c.public_bytes(Encoding.PEM).decode() for c in certs]
    return "".join(out)


@app.command("push-image")
def push_image(
    tag: Annotated[str, typer.Argument(help="driver image tag, e.g. 580-5.15.0-125-generic-ubuntu22.04")],
    driver_version: Annotated[str | None, typer.Option(
        metavar="VERSION", help="DRIVER_VERSION in the image config [default: the branch's pinned version]")] = None,
    cuda_version: Annotated[str | None, typer.Option(metavar="VERSION",
                                                     help="also set CUDA_VERSION in the image config")] = None,
    repo: Annotated[str, typer.Option(metavar="REPO", help="repository in the lab registry")] = "nvidia/driver",
    arch: Annotated[list[str] | None, typer.Option(
        "--arch", metavar="ARCH", help="a CPU architecture the image holds (repeatable: several make an image "
                                       "index) [default: amd64]")] = None,
    state_dir: StateDirOpt = None,
) -> None:
    """Push a tiny image to the lab registry over the distribution API (no Docker needed): one linux/amd64 image,
    or with --arch, one image per architecture under an index."""
    from gpualign.lab import actions, cluster, seed
    from gpualign.model.version import DriverVersion

    archs = tuple(dict.fromkeys(arch or ["amd64"]))
    bad = [a for a in archs if a not in ("amd64", "arm64")]
    if bad:
        raise BadInput(f"--arch {bad[0]!r}: expected amd64 or arm64")
    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir)
    env: dict[str, str] = {}
    if repo == seed.DRIVER_REPO:
        version = driver_version or seed.driver_version_for(tag.split("-", 1)[0].split(".")[0])
        try:
            DriverVersion.parse(version)
        except ValueError:
            raise BadInput(f"--driver-version {version!r}: expected e.g. 580.95.05") from None
        env = {"DRIVER_VERSION": version, "DRIVER_BRANCH": version.split(".")[0]}
    if cuda_version:
        env["CUDA_VERSION"] = cuda_version
    actions.push_image(state.registry, repo, tag, env, archs,
                       seed.driver_image_labels(tag) if repo == seed.DRIVER_REPO else None)
    progress(f"pushed {state.registry}/{repo}:{tag}" + (f" ({', '.join('linux/' + a for a in archs)})"
                                                          if archs != ("amd64",) else ""))


@app.command("push-self")
def push_self(
    builder: Annotated[bool, typer.Option("--builder", help="also push the builder image (build Jobs run it), "
                                                            "printed on a second line")] = False,
    state_dir: StateDirOpt = None,
) -> None:
    """Push gpualign's own container image (built by `make image`) to the lab registry, for the chart and for Jobs
    on the real node. Prints the image reference."""
    from gpualign.lab import cluster, own_image

    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir)
    for which in ((False, True) if builder else (False,)):
        started = time.monotonic()
        ref = own_image.push(state.registry, builder=which)
        progress(f"pushed {ref} in {time.monotonic() - started:.1f}s")
        print(ref)


@app.command("chart-values")
def chart_values(
    port: Annotated[int, typer.Option(metavar="PORT", help="the controller's port on the real node; 0 picks a "
                                                           "free one")] = 0,
    state_dir: StateDirOpt = None,
) -> None:
    """Print Helm values that run gpualign's chart on this lab's real node (hostNetwork, the API server's address,
    the node's selector and toleration, the lab registry). Use:
    helm install ga charts/gpualign -n gpualign-system --create-namespace -f <(gpualign lab chart-values)"""
    from gpualign.cli.common import emit_data
    from gpualign.lab import cluster, own_image, processes

    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir)
    if "kubelet" not in state.procs:
        raise BadInput(f"the lab in {sdir} has no real node: start it with `gpualign lab up --real-node`")
    emit_data(own_image.chart_values(state.apiserver, state.registry, port or processes.free_port()), Output.yaml)


AUDIT_LOG = "audit"  # `lab logs`' name for the API server's audit log, beside the components' own logs


@app.command()
def logs(
    component: Annotated[str, typer.Argument(help="a component of `gpualign lab status`: kubelet, containerd, "
                                                  "kube-apiserver, …; audit for the API server's audit log")],
    lines: Annotated[int, typer.Option("--lines", "-n", metavar="N", help="how many of the last lines")] = 40,
    path: Annotated[bool, typer.Option("--path", help="print the log file's path only")] = False,
    state_dir: StateDirOpt = None,
) -> None:
    """The end of one lab component's log (when a pod does not start on the real node: kubelet, containerd)."""
    from gpualign.lab import cluster, processes

    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir, allow_dead=True)
    if component == AUDIT_LOG:
        log = str(sdir / "logs" / "audit.log")
    elif component in state.procs:
        log = state.procs[component].log
    else:
        raise BadInput(f"no lab component {component!r}; components: {', '.join([*state.procs, 'audit'])}")
    if path:
        print(log)
        return
    tail = processes.log_tail(log, lines)
    print(tail if tail else f"(empty: {log})")


@app.command("run-driver")
def run_driver(
    tag: Annotated[str, typer.Argument(help="driver image tag in the lab registry, e.g. 535-6.1.0-50-amd64-debian12")],
    repo: Annotated[str, typer.Option(metavar="REPO", help="repository in the lab registry")] = "nvidia/driver",
    namespace: Annotated[str, typer.Option(metavar="NS", help="namespace of the operator's DaemonSets, and of the "
                                                                "pod")] = "gpu-operator",
    timeout: Annotated[float, typer.Option(metavar="SECONDS", help="how long to wait for the container")] = 120,
    output: OutputOpt = Output.table,
    state_dir: StateDirOpt = None,
) -> None:
    """Run a driver image on the lab's real node as the GPU Operator runs it: the operator's own driver container
    spec (its DaemonSet for the image's kernel when the lab runs the operator, else its manifest), on the node
    labelled as the operator selects a GPU node of that kernel. Prints what nvidia-driver did; the pod, the labels
    and what the spec made on the host are removed afterwards. See docs/ensure.md, "What is proven here"."""
    from gpualign.lab import cluster, driver_pod
    from gpualign.model import driver_tag

    RUN_DRIVER.refuse_unless_allowed(output)
    spec = driver_tag.parse(tag)
    sdir, _ = _dirs(state_dir, None)
    state = cluster.require(sdir)
    if "kubelet" not in state.procs:
        raise BadInput(f"the lab in {sdir} has no real node: start it with `gpualign lab up --real-node`")
    image = f"{state.registry}/{repo}:{tag}"
    ran = driver_pod.run_on_real_node(state, image, spec.kernel, spec.family, re.sub(r"^[a-z]+", "", spec.os_tag),
                                      namespace=namespace, timeout=timeout, progress=progress)
    container = ran.pod["spec"]["containers"][0]
    RUN_DRIVER.print(output, {"image": image, "source": ran.source, "command": container.get("command"),
                              "args": container.get("args"), "exitCode": ran.exit_code,
                              "seconds": round(ran.seconds, 2), "log": ran.log.splitlines()})


def _ran_text(document: dict[str, Any], _shown: Shown) -> None:
    """What nvidia-driver printed in the pod, under the command it ran; how it ended, on stderr."""
    from gpualign.lab import realnode, versions

    log = "\n".join(document["log"])
    stdout.print(f"{' '.join([*(document['command'] or []), *(document['args'] or [])])} in {document['image']}, "
                 f"on {realnode.NAME} ({versions.KUBERNETES} kubelet):", markup=False, highlight=False)
    sys.stdout.write(log + "\n" if log else "")
    sys.stdout.flush()
    ended = "still running" if document["exitCode"] is None else f"exited {document['exitCode']}"
    progress(f"the container {ended} {document['seconds']:.1f}s after the pod was created")


RUN_DRIVER = Printers(command="lab run-driver", table=_ran_text, wide=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="lab", short_help="A real control plane with simulated GPU nodes, for the demo and "
                                              "the tests.")
