"""Build the lab's binaries from the pinned Go wrapper modules into a cache outside the repository.

Each target builds into a scratch directory and is moved into place only when the whole target succeeds, so an
interrupted build never leaves a half-written binary where `lab up` would find it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpualign.base.errors import BadInput, LabError
from gpualign.lab import versions

GO_MODULES = Path(__file__).parent / "go"


@dataclass(frozen=True)
class Target:
    """One `go build` in one wrapper module."""

    name: str
    module_dir: Path
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    ldflags: str = "-s -w"
    output_name: str | None = None  # for a single package whose last path element is not the binary name
    subdir: str = ""  # the whole target lands in bin_dir/subdir, replaced as one directory
    data: Callable[[Target, Path], None] | None = None  # copies data files next to the binaries, before the move


def targets() -> list[Target]:
    k8s = versions.KUBERNETES
    stamp = " ".join(
        f"-X {pkg}.gitVersion={k8s}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    )
    op = versions.GPU_OPERATOR
    op_stamp = (f"-X {versions.GPU_OPERATOR_MODULE}/internal/info.version={op} "
                f"-X {versions.GPU_OPERATOR_MODULE}/internal/info.gitCommit={versions.GPU_OPERATOR_COMMIT}")
    return [
        Target("etcd", GO_MODULES / "etcd", ("go.etcd.io/etcd/server/v3",), versions.ETCD_BINARIES,
               output_name="etcd"),
        Target("kwok", GO_MODULES / "kwok", ("sigs.k8s.io/kwok/cmd/kwok",), versions.KWOK_BINARIES),
        Target(
            "kubernetes",
            GO_MODULES / "kubernetes",
            tuple(f"k8s.io/kubernetes/cmd/{b}" for b in versions.KUBERNETES_BINARIES),
            versions.KUBERNETES_BINARIES,
            ldflags=f"-s -w {stamp}",
        ),
        Target("kubelet", GO_MODULES / "kubernetes", ("k8s.io/kubernetes/cmd/kubelet",), versions.KUBELET_BINARIES,
               ldflags=f"-s -w {stamp}", output_name="kubelet"),
        Target("gpu-operator", GO_MODULES / "gpu-operator", (f"{versions.GPU_OPERATOR_MODULE}/cmd/gpu-operator",),
               ("gpu-operator",), ldflags=f"-s -w {op_stamp}", output_name="gpu-operator",
               subdir=versions.GPU_OPERATOR_SUBDIR, data=operator_data),
        Target("helm", GO_MODULES / "helm", (f"{versions.HELM_MODULE}/cmd/helm",), ("helm",),
               ldflags=f"-s -w -X {versions.HELM_MODULE}/internal/version.version={versions.HELM} " + " ".join(
                   f"-X {versions.HELM_MODULE}/pkg/{pkg}.k8sVersion{part}={value}"  # as helm's Makefile stamps it
                   for pkg in ("lint/rules", "chartutil")
                   for part, value in zip(("Major", "Minor"), versions.HELM_KUBE, strict=True)),
               output_name="helm", subdir=versions.HELM_SUBDIR),
        Target("toxiproxy", GO_MODULES / "toxiproxy", (f"{versions.TOXIPROXY_MODULE}/cmd/server",),
               ("toxiproxy-server",), ldflags=f"-s -w -X {versions.TOXIPROXY_MODULE}.Version={versions.TOXIPROXY}",
               output_name="toxiproxy-server", subdir=versions.TOXIPROXY_SUBDIR),
        Target("cosign", GO_MODULES / "cosign", (f"{versions.COSIGN_MODULE}/cmd/cosign",), ("cosign",),
               ldflags=f"-s -w -X sigs.k8s.io/release-utils/version.gitVersion={versions.COSIGN}",
               output_name="cosign", subdir=versions.COSIGN_SUBDIR),
        Target("promtool", GO_MODULES / "promtool", (f"{versions.PROMETHEUS_MODULE}/cmd/promtool",), ("promtool",),
               ldflags=f"-s -w -X github.com/prometheus/common/version.Version={versions.PROMETHEUS}",
               output_name="promtool", subdir=versions.PROMTOOL_SUBDIR),
        Target("policy-controller", GO_MODULES / "policy-controller",
               (f"{versions.POLICY_CONTROLLER_MODULE}/cmd/tester",), ("policy-tester",),
               ldflags=f"-s -w -X sigs.k8s.io/release-utils/version.gitVersion={versions.POLICY_CONTROLLER}",
               output_name="policy-tester", subdir=versions.POLICY_CONTROLLER_SUBDIR),
    ]


def module_source(target: Target, module: str) -> Path:
    """Where the Go module cache holds a dependency's source (read-only files)."""
    proc = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=target.module_dir, env=go_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise LabError(f"cannot locate {module} in the Go module cache: {proc.stderr.strip()[:200]}")
    return Path(proc.stdout.strip())


def operator_data(target: Target, out: Path) -> None:
    """The files the operator's image carries (its Dockerfile: COPY assets /opt/gpu-operator/, manifests/state-driver
    into /opt/gpu-operator/manifests/) and its CRDs, all from the same module version as the binary."""
    src = module_source(target, versions.GPU_OPERATOR_MODULE)
    opt = out / "opt" / "gpu-operator"
    shutil.copytree(src / "assets", opt)
    shutil.copytree(src / "manifests" / "state-driver", opt / "manifests" / "state-driver")
    shutil.copytree(src / "deployments" / "gpu-operator" / "crds", out / "crds")
    for path in [out, *out.rglob("*")]:  # the module cache is read-only; the cache must stay removable
        path.chmod(path.stat().st_mode | 0o200)


def missing(bin_dir: Path, target: Target) -> list[str]:
    return [b for b in target.binaries if not os.access(bin_dir / target.subdir / b, os.X_OK)]


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="0")
    env.setdefault("GOFLAGS", "-mod=readonly")
    return env


# Seconds each cold build took on 2 cores beside the others (Go caches empty; the demo's targets from
# docs/benchmarks.md's cold `lab build`, kwok and Helm after Kubernetes; cosign's, policy-tester's and promtool's from
# a cold `make test`): the order to start them in when no build-times.json is recorded yet, largest first, and what
# a first build says it will take.
SIZE_HINT = {"kubernetes": 703.0, "cosign": 333.0, "gpu-operator": 334.0, "policy-controller": 320.0,
             "promtool": 297.0, "etcd": 69.0, "kubelet": 31.0, "helm": 27.0, "kwok": 25.0, "toxiproxy": 11.0}
# A target that shares packages with another waits for it: built at once, both would compile the same packages (Go's
# cache shares finished work, not work in progress). kubelet is built from Kubernetes' module; kwok's and Helm's
# modules require every module they share with it at its versions (go/kwok/go.mod, go/helm/go.mod).
AFTER = {"kubelet": "kubernetes", "kwok": "kubernetes", "helm": "kubernetes"}


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _recorded_times(bin_dir: Path) -> dict[str, float]:
    record = bin_dir.parent / "build-times.json"
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)} if isinstance(data, dict) \
        else {}


def build_target(target: Target, bin_dir: Path, log: Path) -> float:
    """Build one target; return the seconds it took. Raises LabError with the log's tail on failure."""
    if shutil.which("go") is None:
        raise LabError("go not found on PATH: the lab binaries are built from Go modules (Go >= 1.26)")
    scratch = bin_dir.parent / f".build-{target.name}-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    out = str(scratch / target.output_name) if target.output_name else str(scratch) + "/"
    cmd = ["go", "build", "-trimpath", "-ldflags", target.ldflags, "-o", out, *target.packages]
    started = time.monotonic()
    try:
        with log.open("w") as fh:
            fh.write(" ".join(cmd) + "\n")
            fh.flush()
            proc = subprocess.run(cmd, cwd=target.module_dir, env=go_env(), stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise LabError(f"building {target.name} failed (exit {proc.returncode}); log: {log}",
                           detail="\n".join(tail))
        bin_dir.mkdir(parents=True, exist_ok=True)
        if target.data is not None:
            target.data(target, scratch)
        if target.subdir:
            final = bin_dir / target.subdir
            shutil.rmtree(final, ignore_errors=True)
            os.replace(scratch, final)
        else:
            for binary in target.binaries:
                os.replace(scratch / binary, bin_dir / binary)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started


def build(bin_dir: Path, *, force: bool = False, only: list[str] | None = None,
          progress: Callable[[str], None] = lambda _msg: None, jobs: int = 2) -> dict[str, float]:
    """Build every target (or only the named ones) whose binaries are not all in bin_dir. Returns seconds per
    target built. `jobs` targets build at once, the largest first: each `go build` already compiles packages in
    parallel, but its module downloads and its final link (one process) leave cores idle that another fills."""
    from concurrent.futures import ThreadPoolExecutor

    chosen = targets()
    unknown = sorted(set(only or []) - {t.name for t in chosen})
    if unknown:
        raise BadInput(f"unknown build target {', '.join(unknown)}; targets: {', '.join(t.name for t in chosen)}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    todo: list[Target] = []
    for target in (t for t in chosen if not only or t.name in only):
        if not (target.binaries if force else missing(bin_dir, target)):
            progress(f"{target.name}: cached in {bin_dir}")
        else:
            todo.append(target)
    previous_times = _recorded_times(bin_dir)

    import threading

    done = {t.name: threading.Event() for t in todo}

    def one(target: Target) -> None:
        first = AFTER.get(target.name)
        if first in done:
            done[first].wait()
        try:
            _one(target)
        finally:
            done[target.name].set()

    def _one(target: Target) -> None:
        log = bin_dir.parent / f"build-{target.name}.log"
        took = previous_times.get(target.name) or SIZE_HINT.get(target.name)
        usually = f"about {_minutes(took)} {'last time' if target.name in previous_times else 'on 2 cores'}; " \
            if took else ""
        progress(f"{target.name}: building {', '.join(target.binaries if force else missing(bin_dir, target))} "
                 f"({usually}log: {log})")
        seconds = build_target(target, bin_dir, log)
        timings[target.name] = round(seconds, 1)
        progress(f"{target.name}: built in {seconds:.0f}s")

    # largest first; a target that waits for another last, so that its wait never holds a slot others could use
    todo.sort(key=lambda t: (t.name in AFTER, -(previous_times.get(t.name) or SIZE_HINT.get(t.name, 0.0))))
    with ThreadPoolExecutor(max(1, jobs), thread_name_prefix="lab-build") as pool:
        for future in [pool.submit(one, t) for t in todo]:
            future.result()  # the first failure, with its log's tail
    if timings:
        record = bin_dir.parent / "build-times.json"
        previous = json.loads(record.read_text()) if record.exists() else {}
        previous.update(timings)
        record.write_text(json.dumps(previous, indent=2) + "\n")
    return timings
