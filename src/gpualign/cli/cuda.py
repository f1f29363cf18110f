"""`gpualign cuda affinity | inject | check`: CUDA's driver floor as nodeAffinity the scheduler enforces."""

from __future__ import annotations

import enum
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpualign.cli.common import ContextOpt, KubeconfigOpt, Output, OutputOpt, SelectorOpt, emit_data, stdout
from gpualign.errors import EXIT_FINDINGS, BadInput

if TYPE_CHECKING:  # imported lazily at run time
    from gpualign.facts import NodeFacts
    from gpualign.version import DriverVersion

app = typer.Typer(
    help="CUDA forward-compatibility gate: a container's CUDA needs a minimum driver. Write that floor as "
         "nodeAffinity on GPU Feature Discovery's driver labels, so the scheduler refuses a mismatch instead of "
         "the job failing on the node.",
    no_args_is_help=True,
)


class Labels(enum.StrEnum):
    legacy = "legacy"
    current = "current"
    both = "both"


CudaOpt = Annotated[str | None, typer.Option("--cuda", help="CUDA toolkit version, e.g. 12.4 or 12.4.1")]
MinorOpt = Annotated[bool, typer.Option(
    "--minor-compat", help="use the minor-version-compatibility floor (e.g. 525.60.13 for any 12.x): a limited "
                           "feature set, see NVIDIA's compatibility guide")]
LabelsOpt = Annotated[Labels, typer.Option(
    "--labels", help="GFD labels to match: legacy (nvidia.com/cuda.driver.*), current "
                     "(nvidia.com/cuda.driver-version.*) or both (ORed; works with any GFD version)")]


def _minimum(cuda: str | None, minor_compat: bool) -> DriverVersion:
    from gpualign.cuda import minimum_driver

    if not cuda:
        raise BadInput("--cuda is required, e.g. --cuda 12.4")
    return minimum_driver(cuda, minor_compat=minor_compat)


@app.command()
def affinity(cuda: CudaOpt = None, minor_compat: MinorOpt = False, labels: LabelsOpt = Labels.both,
             output: OutputOpt = Output.yaml) -> None:
    """Print the nodeAffinity (the value of spec.affinity.nodeAffinity) admitting only nodes whose driver is at
    least CUDA's minimum, to the revision.

    Example:  gpualign cuda affinity --cuda 12.4 -o yaml
    """
    from gpualign.cuda import node_affinity

    minimum = _minimum(cuda, minor_compat)
    print(f"# CUDA {cuda} needs driver >= {minimum}", file=sys.stderr)
    emit_data(node_affinity(minimum, labels.value), Output.json if output is Output.json else Output.yaml)


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


@app.command()
def inject(
    cuda: CudaOpt = None,
    filename: Annotated[list[str] | None, typer.Option("--filename", "-f", help="manifest file, or - for stdin "
                                                                                "(repeatable)")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", "-i", help="rewrite the files instead of printing")] = False,
    minor_compat: MinorOpt = False,
    labels: LabelsOpt = Labels.both,
) -> None:
    """Add the CUDA driver floor to every pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
    CronJob), ANDed into existing required terms. Idempotent; comments and key order are kept.

    Example:  gpualign cuda inject --cuda 12.8 -f train.yaml | kubectl apply -f -
    """
    from gpualign.cuda import selector_terms
    from gpualign.manifests import inject as do_inject

    minimum = _minimum(cuda, minor_compat)
    if not filename:
        raise BadInput("no manifests: pass -f FILE (or -f - for stdin)")
    if in_place and "-" in filename:
        raise BadInput("--in-place cannot rewrite stdin")
    terms = selector_terms(minimum, labels.value)
    results: list[tuple[str, str]] = []
    for name in filename:  # everything is checked before anything is written
        if name == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(name).read_text()
            except OSError as err:
                raise BadInput(f"{name}: cannot read: {err.strerror}") from None
            except UnicodeDecodeError:
                raise BadInput(f"{name}: not UTF-8 text") from None
        new, count = do_inject(text, terms, "<stdin>" if name == "-" else name)
        print(f"# {name}: {count} pod template(s) now require driver >= {minimum}", file=sys.stderr)
        results.append((name, new))
    for name, new in results:
        if in_place:
            _write_atomically(Path(name), new)
        else:
            sys.stdout.write(new if len(results) == 1 else new if new.startswith("---") else "---\n" + new)


@app.command("check")
def check_cmd(
    cuda: CudaOpt = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="read CUDA_VERSION from this image's config via the registry API, e.g. "
                        "registry://HOST/REPO:TAG or HOST/REPO:TAG")] = None,
    minor_compat: MinorOpt = False,
    selector: SelectorOpt = None,
    nodes_file: Annotated[Path | None, typer.Option("--nodes-file", help="a `kubectl get nodes -o json` dump")] = None,
    docker_config: Annotated[Path | None, typer.Option("--docker-config", help="docker config.json")] = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Which GPU nodes can host a workload built for a CUDA version (or an image), and the fleet's lowest driver.
    Exit 1 when some GPU nodes cannot host it.

    Example:  gpualign cuda check --cuda 12.8
    """
    from gpualign import inventory
    from gpualign.cuda import node_affinity
    from gpualign.nodeaffinity import required_matches

    if bool(cuda) == bool(image):
        raise BadInput("pass exactly one of --cuda VERSION or --image REF")
    if image:
        cuda = _cuda_of_image(image, docker_config)
    minimum = _minimum(cuda, minor_compat)
    if nodes_file:
        inv = inventory.from_file(nodes_file, selector)
    else:
        from gpualign.kube import Kube

        kube = Kube(kubeconfig, context)
        try:
            inv = inventory.from_cluster(kube, selector, with_pods=False)
        finally:
            kube.close()
    aff = node_affinity(minimum, "both")
    able: list[NodeFacts] = []
    unable: list[NodeFacts] = []
    for n in sorted(inv.nodes, key=lambda f: f.name):
        (able if required_matches(aff, n.labels) else unable).append(n)
    drivers = [n.driver for n in inv.nodes if n.driver]
    lowest = min(drivers) if drivers else None
    data = {"cuda": cuda, "minimum_driver": str(minimum), "lowest_driver": str(lowest) if lowest else None,
            "able": [{"name": n.name, "driver": str(n.driver) if n.driver else None} for n in able],
            "unable": [{"name": n.name, "driver": str(n.driver) if n.driver else None} for n in unable]}
    if output in (Output.json, Output.yaml):
        emit_data(data, output)
    else:
        stdout.print(f"CUDA {cuda} needs driver >= {minimum}; the fleet's lowest driver is {lowest or 'unknown'}")
        for n in able:
            stdout.print(f"  [green]can host[/]   {n.name}  (driver {n.driver})")
        for n in unable:
            stdout.print(f"  [bold red]cannot host[/] {n.name}  (driver {n.driver or 'unknown: no GFD labels'})")
        stdout.print(f"{len(able)} of {len(able) + len(unable)} GPU nodes can host it"
                     + (f"; {len(unable)} cannot: {', '.join(n.name for n in unable)}" if unable else ""))
    if unable:
        raise typer.Exit(EXIT_FINDINGS)


def _cuda_of_image(ref: str, docker_config: Path | None) -> str:
    from gpualign.ledger.registry import config_env, connect

    text = ref.removeprefix("registry://").removeprefix("oci://")
    name, sep, tag = text.rpartition(":")
    if not sep or "/" in tag or "/" not in name:
        raise BadInput(f"--image {ref!r}: expected HOST/REPO:TAG")
    client = connect(f"registry://{name}", docker_config=docker_config)
    try:
        config = client.image_config(tag)
    finally:
        client.close()
    if config is None:
        raise BadInput(f"--image {ref}: not found in the registry")
    version = config_env(config).get("CUDA_VERSION")
    if not version:
        raise BadInput(f"--image {ref}: its config sets no CUDA_VERSION; pass --cuda instead")
    return version


class Mode(enum.StrEnum):
    deny = "deny"
    warn = "warn"
    audit = "audit"


@app.command("policy")
def policy_cmd(
    namespace_selector: Annotated[str | None, typer.Option(
        "--namespace-selector", help="namespaces the policy applies to, as a label selector [default: all but "
                                     "kube-system and gpu-operator, whose operands use the nvidia runtime class]")
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help="deny refuses; warn admits with a warning to the client; "
                                                      "audit only annotates the audit log")] = Mode.deny,
) -> None:
    """Print a ValidatingAdmissionPolicy and its binding (YAML, for kubectl apply -f -) that refuse GPU pods and
    pod templates without a driver floor in their nodeAffinity. A workload annotated gpualign.io/cuda: "12.4" must
    also have a floor of at least that version's minimum driver. CEL run by the API server; no webhook.

    Example:  gpualign cuda policy --mode warn | kubectl apply -f -
    """
    from ruamel.yaml import YAML

    from gpualign.cuda_policy import DEFAULT_NAMESPACES, binding, policy
    from gpualign.selectors import to_label_selector

    selector = to_label_selector(namespace_selector if namespace_selector is not None else DEFAULT_NAMESPACES)
    yaml = YAML()
    yaml.width = 100000
    yaml.dump_all([policy(), binding(mode.value, selector)], sys.stdout)
