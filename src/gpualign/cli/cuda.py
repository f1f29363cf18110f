"""`gpualign cuda affinity | inject | check`: CUDA's driver floor as nodeAffinity the scheduler enforces."""

from __future__ import annotations

import enum
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli import complete
from gpualign.cli.common import emit_data, report, warn
from gpualign.cli.fleet import RequestTimeoutOpt
from gpualign.cli.groups import Group
from gpualign.cli.options import (
    ContextOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    NodesFileOpt,
    NoHeadersOpt,
    Output,
    OutputOpt,
    SelectorOpt,
)
from gpualign.cli.printers import DATA, Printers, Shown

if TYPE_CHECKING:  # imported lazily at run time
    from gpualign.model.dra_devices import GpuDevice
    from gpualign.model.facts import NodeFacts
    from gpualign.model.version import DriverVersion

app = typer.Typer(
    help="CUDA forward-compatibility gate: a container's CUDA needs a minimum driver. Write that floor as "
         "nodeAffinity on GPU Feature Discovery's driver labels, so the scheduler refuses a mismatch instead of "
         "the job failing on the node.",
    no_args_is_help=True,
    cls=Group,
)


class Labels(enum.StrEnum):
    legacy = "legacy"
    current = "current"
    both = "both"


CudaOpt = Annotated[str | None, typer.Option("--cuda", metavar="VERSION", autocompletion=complete.cuda_versions,
                                             help="CUDA toolkit version, e.g. 12.4 or 12.4.1")]
MinorOpt = Annotated[bool, typer.Option(
    "--minor-compat", help="use the minor-version-compatibility floor (e.g. 525.60.13 for any 12.x): a limited "
                           "feature set, see NVIDIA's compatibility guide")]
LabelsOpt = Annotated[Labels, typer.Option(
    "--labels", metavar="SET", help="GFD labels to match: legacy (nvidia.com/cuda.driver.*), current "
                     "(nvidia.com/cuda.driver-version.*) or both (ORed; works with any GFD version)")]


def _minimum(cuda: str | None, minor_compat: bool) -> DriverVersion:
    from gpualign.model.cuda import minimum_driver

    if not cuda:
        raise BadInput("--cuda is required, e.g. --cuda 12.4")
    minimum = minimum_driver(cuda, minor_compat=minor_compat)
    parts = cuda.strip().split(".")
    if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) and not minor_compat:
        from gpualign.model.cuda import table

        minor, update = ".".join(parts[:2]), int(parts[2])
        listed = sorted(table().updates.get(minor, {}))
        if update not in listed:  # the table lists the updates that raised the floor, so this may be harmless
            warn(f"CUDA {cuda}: the table lists no update {update} of {minor} (it lists the updates that raised the "
                 f"driver floor: {', '.join(f'{minor}.{u}' for u in listed) or 'none'}); using {minimum}")
    return minimum


@app.command()
def affinity(cuda: CudaOpt = None, minor_compat: MinorOpt = False, labels: LabelsOpt = Labels.both,
             output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT",
                                                 help="yaml or json")] = "yaml") -> None:
    """Print the nodeAffinity (the value of spec.affinity.nodeAffinity) admitting only nodes whose driver is at
    least CUDA's minimum, to the revision.

    Example:

    \b
        gpualign cuda affinity --cuda 12.4 -o yaml
    """
    if output not in DATA:  # an object, not a report: its own word for any other format
        raise BadInput(f"--output {output!r}: cuda affinity prints yaml or json (it is an object, not a table)")
    from gpualign.model.cuda import node_affinity

    minimum = _minimum(cuda, minor_compat)
    print(f"# CUDA {cuda} needs driver >= {minimum}", file=sys.stderr)
    emit_data(node_affinity(minimum, labels.value), Output(output))


@app.command("deviceclass")
def device_class_cmd(
    cuda: CudaOpt = None,
    minor_compat: MinorOpt = False,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME", help="the DeviceClass's name [default: nvidia-gpu-cuda-MAJOR-MINOR]")] = None,
    mig: Annotated[bool, typer.Option("--mig", help="MIG devices instead of whole GPUs")] = False,
    extended_resource: ExtendedOpt = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="yaml or json")] = "yaml",
) -> None:
    """Print a DeviceClass (resource.k8s.io/v1) of NVIDIA GPUs whose driver is at least CUDA's minimum, for DRA:
    a claim through it (deviceClassName) is allocated only such devices, with no selector of its own.

    With --extended-resource NAME (DRA's extended-resource mapping, GA in Kubernetes 1.37), a pod that asks for
    NAME in its resources, with no claim, is allocated this class's devices: NAME nvidia.com/gpu floors every such
    pod of the cluster (one class may map it); a name of your own (example.com/gpu-cuda-12.8) floors the pods that
    ask for it, which `cuda inject --extended-resource NAME` writes.

    Example:

    \b
        gpualign cuda deviceclass --cuda 12.8 | kubectl apply -f -
        gpualign cuda deviceclass --cuda 12.8 --extended-resource example.com/gpu-cuda-12.8 | kubectl apply -f -
    """
    if output not in DATA:  # an object, not a report: its own word for any other format
        raise BadInput(f"--output {output!r}: cuda deviceclass prints yaml or json (an object, not a table)")
    from gpualign.model.dra_floor import device_class

    _check_extended(extended_resource)
    minimum = _minimum(cuda, minor_compat)
    assert cuda is not None
    kind = "mig" if mig else "gpu"
    chosen = name or f"nvidia-{kind}-cuda-{'-'.join(cuda.strip().split('.')[:2])}"
    print(f"# CUDA {cuda} needs driver >= {minimum}", file=sys.stderr)
    emit_data(device_class(chosen, minimum, cuda, kind, extended_resource), Output(output))


ExtendedOpt = Annotated[str | None, typer.Option(
    "--extended-resource", metavar="NAME",
    help="the extended resource a floored DeviceClass maps (Kubernetes 1.37: a pod asking for it is allocated "
         "that class's devices through DRA)")]


def _check_extended(name: str | None) -> None:
    from gpualign.model.dra_floor import extended_resource_problem

    if name is not None and (why := extended_resource_problem(name)):
        raise BadInput(f"--extended-resource {name!r}: {why}")


def _read_all(names: list[str]) -> list[tuple[str, str]]:
    """(name, text) of each input (- is stdin): a file that cannot be read, or is not UTF-8, is bad input."""
    texts: list[tuple[str, str]] = []
    for name in names:
        if name == "-":
            texts.append((name, sys.stdin.read()))
            continue
        try:
            texts.append((name, Path(name).read_text()))
        except OSError as err:
            raise BadInput(f"{name}: cannot read: {err.strerror}") from None
        except UnicodeDecodeError:
            raise BadInput(f"{name}: not UTF-8 text") from None
    return texts


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _expand(names: list[str]) -> list[str]:
    """Files as given; a directory becomes its *.yaml, *.yml and *.json files in name order (not recursive), as
    `kubectl apply -f DIR` reads it."""
    out: list[str] = []
    for name in names:
        path = Path(name)
        if name != "-" and path.is_dir():
            found = sorted(str(p) for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
            if not found:
                raise BadInput(f"{name}: a directory with no *.yaml, *.yml or *.json file")
            out.extend(found)
        else:
            out.append(name)
    return out


@app.command()
def inject(
    cuda: CudaOpt = None,
    filename: Annotated[list[str] | None, typer.Option(
        "--filename", "-f", metavar="FILE",
        help="manifest file, a directory of them (*.yaml, *.yml, *.json, as kubectl -f reads one), or - for "
             "stdin (repeatable)")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", "-i", help="rewrite the files instead of printing")] = False,
    minor_compat: MinorOpt = False,
    labels: LabelsOpt = Labels.both,
    device_class: Annotated[list[str] | None, typer.Option(
        "--device-class", metavar="NAME",
        help="a DeviceClass of yours whose devices are NVIDIA GPUs (repeatable; gpu.nvidia.com, mig.nvidia.com and "
             "the classes the input defines over NVIDIA's DRA driver are known)")] = None,
    extended_resource: Annotated[str | None, typer.Option(
        "--extended-resource", metavar="NAME",
        help="on a DRA cluster (no GFD labels), pods asking for nvidia.com/gpu ask for NAME instead, the extended "
             "resource of a floored DeviceClass (`cuda deviceclass --extended-resource NAME`), and get no "
             "nodeAffinity")] = None,
) -> None:
    """Add the CUDA driver floor to every GPU pod template and every DRA claim for NVIDIA GPUs. Idempotent;
    comments and key order are kept.

    A GPU pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob asking for nvidia.com/gpu
    or MIG resources, or an nvidia runtimeClass: what `gpualign cuda policy` calls a GPU pod) gets a nodeAffinity on
    gpu-feature-discovery's driver labels, ANDed into existing required terms. A ResourceClaimTemplate or
    ResourceClaim (resource.k8s.io/v1) whose requests name an NVIDIA device class gets a device selector on the
    driverVersion NVIDIA's DRA driver publishes; a pod whose GPUs come from claims gets no nodeAffinity (its nodes
    carry no GFD labels).

    Output is plain YAML (no anchors or aliases), ready for review and GitOps. A template that asks for no GPU, a
    claim for other devices and every other kind are left as they are, each with a warning.

    Example:

    \b
        gpualign cuda inject --cuda 12.8 -f train.yaml | kubectl apply -f -
    """
    from gpualign.model import dra_floor
    from gpualign.model.cuda import selector_terms
    from gpualign.model.manifests import device_classes
    from gpualign.model.manifests import inject as do_inject

    minimum = _minimum(cuda, minor_compat)
    _check_extended(extended_resource)
    if not filename:
        raise BadInput("no manifests: pass -f FILE (or -f - for stdin)")
    if in_place and "-" in filename:
        raise BadInput("--in-place cannot rewrite stdin")
    terms = selector_terms(minimum, labels.value)
    texts = _read_all(_expand(filename))  # everything is read and checked before anything is written
    source = {name: "<stdin>" if name == "-" else name for name, _ in texts}
    classes = dra_floor.nvidia_classes([dc for name, text in texts for dc in device_classes(text, source[name])],
                                       device_class or ())
    results: list[tuple[str, str]] = []
    for name, text in texts:
        new, count, claims, left = do_inject(text, terms, source[name], minimum, classes, extended_resource)
        for why in left:
            warn(why)
        if count == 0 and claims == 0:
            warn(f"{name}: no GPU pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob "
                 "asking for NVIDIA GPUs) and no claim for NVIDIA GPUs: left as it is")
        else:
            done = [f"{count} GPU pod template(s)"] if count else []
            done += [f"{claims} DRA claim request(s)"] if claims else []
            print(f"# {name}: {' and '.join(done)} now require driver >= {minimum}", file=sys.stderr)
        results.append((name, new))
    for name, new in results:
        if in_place:
            _write_atomically(Path(name), new)
        else:
            sys.stdout.write(new if len(results) == 1 else new if new.startswith("---") else "---\n" + new)


ImageOpt = Annotated[str | None, typer.Option(
    "--image", metavar="REF", help="read CUDA_VERSION from this image's config via the registry API, e.g. "
                    "registry://HOST/REPO:TAG or HOST/REPO:TAG")]


@dataclass(frozen=True, kw_only=True)
class CudaCheckFlags:
    """`gpualign cuda check`'s flags, as given."""

    cuda: CudaOpt
    image: ImageOpt
    minor_compat: MinorOpt
    selector: SelectorOpt
    nodes_file: NodesFileOpt
    docker_config: DockerConfigOpt
    insecure_registry: InsecureRegistryOpt
    output: OutputOpt
    no_headers: NoHeadersOpt
    kubeconfig: KubeconfigOpt
    context: ContextOpt
    request_timeout: RequestTimeoutOpt


@app.command("check")
def check_cmd(
    cuda: CudaOpt = None,
    image: ImageOpt = None,
    minor_compat: MinorOpt = False,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """Which GPU nodes can host a workload built for a CUDA version (or an image), and the fleet's lowest driver.
    Exit 1 when some GPU nodes cannot host it (or -l matches none).

    Example:

    \b
        gpualign cuda check --cuda 12.8
    """
    run_cuda_check(CudaCheckFlags(**locals()))


def run_cuda_check(f: CudaCheckFlags) -> None:
    cuda = f.cuda
    from gpualign.cli.common import say_tty
    from gpualign.model.cuda import node_affinity
    from gpualign.model.nodeaffinity import required_matches
    from gpualign.usecases.nodes import read_nodes

    if bool(cuda) == bool(f.image):
        raise BadInput("pass exactly one of --cuda VERSION or --image REF")
    if f.image:
        cuda = _cuda_of_image(f.image, f.docker_config)
    minimum = _minimum(cuda, f.minor_compat)
    from gpualign.cli.fleet import parse_timeout

    read = read_nodes(f.nodes_file, f.kubeconfig, f.context, f.selector, with_pods=False,
                      timeout=parse_timeout(f.request_timeout), say=say_tty, warn=warn)
    inv = read.inventory
    devices = read.devices or {}
    aff = node_affinity(minimum, "both")
    able: list[NodeFacts] = []
    unable: list[NodeFacts] = []
    for n in sorted(inv.nodes, key=lambda f: f.name):
        if n.driver_from_dra:  # the operator's DRA mode: the driver its slices publish, a claim's floor selects on
            (able if n.driver is not None and n.driver >= minimum else unable).append(n)
        else:
            (able if required_matches(aff, n.labels) else unable).append(n)

    def entry(n: NodeFacts) -> dict[str, object]:
        source = "dra" if n.driver_from_dra else "gfd" if n.driver else None
        return {"name": n.name, "driver": str(n.driver) if n.driver else None, "source": source,
                **({"devices": [d.as_dict() for d in devices.get(n.name, [])]} if source == "dra" else {})}

    drivers = [n.driver for n in inv.nodes if n.driver]
    lowest = min(drivers) if drivers else None
    data = {"cuda": cuda, "minimum_driver": str(minimum), "lowest_driver": str(lowest) if lowest else None,
            "able": [entry(n) for n in able], "unable": [entry(n) for n in unable]}
    CUDA_CHECK.print(f.output, report("CudaCheckReport", read.source, data, cuda=True), able, unable, devices,
                     minimum, no_headers=f.no_headers)
    if unable or (f.selector and not inv.nodes):
        raise typer.Exit(EXIT_FINDINGS)



def _why_not_host(node: NodeFacts, minimum: DriverVersion, devices: list[GpuDevice] | None) -> str:
    """Why a node does not meet the floor, in one line (cuda check -o wide)."""
    if devices:
        from collections import Counter

        count = Counter(str(d.driver or "no driverVersion") for d in devices)
        below = ", ".join(f"{n} on {driver}" for driver, n in sorted(count.items()))
        return f"its DRA devices' drivers are below {minimum} ({below})"
    if node.driver is None:
        return ("gpu-feature-discovery has not labelled its driver version and NVIDIA's DRA driver publishes no "
                "device for it; nodeAffinity on GFD labels never matches it")
    return f"driver {node.driver} is below {minimum}"


def _cuda_of_image(ref: str, docker_config: Path | None) -> str:
    from gpualign.usecases.image_cuda import ImageUnusable, NoCudaVersion, cuda_of_image

    try:
        return cuda_of_image(ref, docker_config)
    except NoCudaVersion as err:
        raise BadInput(f"--image {err.ref}: {err.why}; pass --cuda instead") from None
    except ImageUnusable as err:
        raise BadInput(f"--image {err.ref}: {err.why}") from None


class Mode(enum.StrEnum):
    deny = "deny"
    warn = "warn"
    audit = "audit"


@app.command("policy")
def policy_cmd(
    exempt_namespace: Annotated[list[str] | None, typer.Option(
        "--exempt-namespace", metavar="NAMESPACE",
        help="another namespace the policy leaves alone, e.g. where your GPU Operator runs under a custom name "
             "(repeatable; added to kube-system, gpu-operator and nvidia-gpu-operator)")] = None,
    namespace_selector: Annotated[str | None, typer.Option(
        "--namespace-selector", metavar="SELECTOR",
        help="namespaces the policy applies to, as a label selector; replaces the exemptions [default: "
             "kubernetes.io/metadata.name notin (kube-system,gpu-operator,nvidia-gpu-operator)]")] = None,
    mode: Annotated[Mode, typer.Option("--mode", metavar="MODE",
                                       help="deny refuses; warn admits with a warning to the client; audit only "
                                            "annotates the audit log")] = Mode.deny,
    device_class: Annotated[list[str] | None, typer.Option(
        "--device-class", metavar="NAME",
        help="a DeviceClass of yours whose devices are NVIDIA GPUs: its claims need a floor too (repeatable; "
             "gpu.nvidia.com and mig.nvidia.com always do)")] = None,
    extended_resource: Annotated[list[str] | None, typer.Option(
        "--extended-resource", metavar="NAME=CUDA",
        help="an extended resource a DeviceClass floored at CUDA maps (`cuda deviceclass --cuda CUDA "
             "--extended-resource NAME`): a pod asking only for such resources is floored by the class and needs "
             "no nodeAffinity (repeatable)")] = None,
) -> None:
    """Print two ValidatingAdmissionPolicies and their bindings (YAML, for kubectl apply -f -): one refuses GPU pods
    and pod templates without a driver floor in their nodeAffinity, the other DRA claims (ResourceClaim,
    ResourceClaimTemplate) for NVIDIA GPUs without a driverVersion floor in their device selectors. A workload or
    claim annotated gpualign.io/cuda: "12.4" must also have a floor of at least that version's minimum driver. CEL
    run by the API server; no webhook. A pod whose GPUs come from resource claims needs no nodeAffinity: its
    claims carry the floor.

    GPU pods are told by their nvidia.com/gpu requests or a runtime class named like nvidia. The GPU Operator's own
    operands are such pods without a floor, so its namespace must be exempt: gpu-operator (Helm's default) and
    nvidia-gpu-operator (OpenShift's) are; name any other with --exempt-namespace.

    Example:

    \b
        gpualign cuda policy --mode warn --exempt-namespace gpu-system | kubectl apply -f -
    """
    from ruamel.yaml import YAML

    from gpualign.model.cuda_policy import CLAIMS_NAME, EXEMPT_NAMESPACES, binding, claims_policy, policy
    from gpualign.model.cuda_policy import namespace_selector as default_selector
    from gpualign.model.selectors import to_label_selector

    if namespace_selector is not None and exempt_namespace:
        raise BadInput("--namespace-selector replaces the exemptions: pass it or --exempt-namespace, not both")
    text = namespace_selector if namespace_selector is not None else \
        default_selector(tuple(dict.fromkeys([*EXEMPT_NAMESPACES, *(exempt_namespace or [])])))
    selector = to_label_selector(text)
    floors = {}
    for item in extended_resource or []:
        name, sep, version = item.partition("=")
        if not sep or not version:
            raise BadInput(f"--extended-resource {item!r}: expected NAME=CUDA, e.g. nvidia.com/gpu=12.8")
        _check_extended(name)
        try:
            floors[name] = _minimum(version, False)
        except BadInput as err:
            raise BadInput(f"--extended-resource {item!r}: {err.message}") from None
    print(f"# applies to namespaces matching: {text or 'all'}", file=sys.stderr)
    yaml = YAML()
    yaml.width = 100000
    yaml.representer.ignore_aliases = lambda *_: True
    yaml.dump_all([policy(floors), binding(mode.value, selector), claims_policy(device_class or []),
                   binding(mode.value, selector, CLAIMS_NAME)], sys.stdout)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="cuda", short_help="A CUDA version's driver floor as nodeAffinity, and the policy "
                                                "that makes it mandatory.")


def _cuda_check_table(document: dict[str, Any], shown: Shown, able: list[NodeFacts], unable: list[NodeFacts],
                      devices: dict[str, Any], minimum: DriverVersion) -> None:
    """Which nodes can host the workload and which cannot (-o wide: each one's kernel, architecture and why)."""
    from gpualign.cli.table import Styled, render, use_color

    def row(n: NodeFacts, can: bool) -> list[str | Styled]:
        driver = (f"{n.driver} (DRA)" if n.driver_from_dra else str(n.driver)) if n.driver else \
            "unknown (no GFD labels, no DRA devices)"
        cells: list[str | Styled] = [n.name, Styled("yes", "green") if can else Styled("no", "bold red"), driver]
        if shown.wide:
            why = "-" if can else _why_not_host(n, minimum, devices.get(n.name) if n.driver_from_dra else None)
            cells += [n.kernel or "-", n.arch, why]
        return cells

    rows = [row(n, True) for n in able] + [row(n, False) for n in unable]
    text = (f"CUDA {document['cuda']} needs driver >= {minimum}; the fleet's lowest driver is "
            f"{document['lowest_driver'] or 'unknown'}\n")
    text += render(["NODE", "CAN HOST", "DRIVER"] + (["KERNEL", "ARCH", "REASON"] if shown.wide else []), rows,
                   color=use_color(), no_headers=shown.no_headers)
    text += (f"{len(able)} of {len(able) + len(unable)} GPU nodes can host it"
             + (f"; {len(unable)} cannot: {', '.join(n.name for n in unable)}" if unable else "") + "\n")
    sys.stdout.write(text)


CUDA_CHECK = Printers(command="cuda check", table=_cuda_check_table)
