"""`gpualign check` (which image every GPU node needs, and is it in the ledger) and `gpualign plan` (what must be
built before a kernel, OS or branch change)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from gpualign.cli.common import ContextOpt, KubeconfigOpt, Output, OutputOpt, SelectorOpt, emit_data, stdout
from gpualign.errors import EXIT_FINDINGS, BadInput

if TYPE_CHECKING:  # imported lazily at run time: each command loads only what it uses
    from gpualign.audit import Audit
    from gpualign.branches import BranchPolicy
    from gpualign.inventory import Inventory, OperatorView

NodesFileOpt = Annotated[Path | None, typer.Option(
    "--nodes-file", help="read nodes from a `kubectl get nodes -o json` dump instead of a cluster")]
LedgerOpt = Annotated[list[str] | None, typer.Option(
    "--ledger", help="where the team's driver images are listed (repeatable, merged): a text file (one tag or "
                     "image per line, # comments), a YAML/JSON list, or registry://HOST[:PORT]/REPO")]
BranchOpt = Annotated[str | None, typer.Option(
    "--driver-branch", help="driver branch for every node, e.g. 580 [default: the branch each node's driver pod "
                            "is deployed with, else the loaded driver's]")]
PolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", help="YAML file mapping node selectors to branches (pools: [{selector, branch}]); first match wins")]
RulesOpt = Annotated[Path | None, typer.Option(
    "--rules", help="override the built-in naming rules (same shape as gpualign/rules/driver_images.yaml)")]
RepositoryOpt = Annotated[str | None, typer.Option(
    "--repository", help="image repository for full references [default: the registry ledger's, else "
                         "nvcr.io/nvidia/driver]")]
DockerConfigOpt = Annotated[Path | None, typer.Option(
    "--docker-config", help="docker config.json with registry credentials [default: $DOCKER_CONFIG or ~/.docker]")]


def _policy(branch: str | None, policy: Path | None) -> BranchPolicy:
    from gpualign.branches import BranchPolicy, load_policy
    from gpualign.tags import normalize_branch

    if branch and policy:
        raise BadInput("--driver-branch and --policy are exclusive: use one")
    if policy:
        return load_policy(policy)
    return BranchPolicy(default=normalize_branch(branch) if branch else None)


def _repository(explicit: str | None, ledgers: list[str]) -> str:
    from gpualign.ledger.registry import parse_ref
    from gpualign.ledger.sources import is_registry

    if explicit:
        return explicit.rstrip("/")
    for source in ledgers:
        if is_registry(source):
            return parse_ref(source).image
    return "nvcr.io/nvidia/driver"


def _inventory(nodes_file: Path | None, kubeconfig: str | None, context: str | None, selector: str | None,
               *, with_pods: bool = True) -> Inventory:
    return _read(nodes_file, kubeconfig, context, selector, with_pods=with_pods)[0]


def _read(nodes_file: Path | None, kubeconfig: str | None, context: str | None, selector: str | None,
          *, with_pods: bool = True, with_operator: bool = False) -> tuple[Inventory, OperatorView | None]:
    """The nodes (and driver pods) from a dump or a cluster; from a cluster, also the GPU Operator's configuration."""
    from gpualign import inventory

    if nodes_file:
        return inventory.from_file(nodes_file, selector), None
    from gpualign.kube import Kube

    kube = Kube(kubeconfig, context)
    try:
        inv = inventory.from_cluster(kube, selector, with_pods=with_pods)
        return inv, inventory.operator_view(kube, inv.nodes) if with_operator else None
    finally:
        kube.close()


def _warn(message: str) -> None:
    from gpualign.cli.common import stderr

    stderr.print(f"gpualign: warning: {message}", soft_wrap=True, highlight=False, markup=False)


OperatorVersionOpt = Annotated[str | None, typer.Option(
    "--operator-version", help="name OS tags as this GPU Operator version does, e.g. v25.10.1 (RHEL keeps its "
                               "full VERSION_ID before v26.3.0) [default: the version on the cluster's ClusterPolicy "
                               "(label app.kubernetes.io/version), else the newest rules]")]


STATUS_STYLE = {"present": "green", "missing": "bold red", "unknown": "yellow", "host-managed": "cyan",
                "operator-mismatch": "bold magenta"}


def _check_table(result: Audit, wide: bool) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    cols = ["NODE", "OS", "KERNEL", "BRANCH", "REQUIRED TAG", "STATUS", "DRIVER POD"]
    if wide:
        cols += ["SOURCE", "PUBLISHED", "DRIVER", "POD IMAGE TAG"]
    cols.append("REASON")
    for c in cols:
        table.add_column(c, no_wrap=c != "REASON", overflow="fold")
    for f in result.findings:
        row = [f.name, f.os_tag or "-", f.kernel or "-", f.branch or "-", f.tag or "-",
               f"[{STATUS_STYLE.get(f.status, '')}]{f.status}[/]", f.driver_pod.state if f.driver_pod else "-"]
        if wide:
            pod = f.driver_pod
            row += [f.source or "-", "yes" if f.published else "no", f.driver or "-", pod.tag if pod else "-"]
        row.append(f.reason)
        table.add_row(*row)
    stdout.print(table)
    if result.missing:
        stdout.print("\n[bold]missing[/bold] (build or mirror these before the nodes lose their GPUs):")
        for _tag, image, nodes in result.missing:
            stdout.print(f"  {image}  <- {', '.join(nodes)}")
    s = result.summary()
    stdout.print(f"\n{s['gpu_nodes']} GPU nodes: {s['present']} present, {s['missing']} missing, "
                 f"{s['unknown']} unknown, {s['host_managed']} host-managed"
                 + (f", {s['operator_mismatch']} where the operator deploys a mismatched image"
                    if s["operator_mismatch"] else "")
                 + (f", {s['pod_kernel_mismatch']} driver pods built for another kernel"
                    if s["pod_kernel_mismatch"] else ""))


def check(
    ledger: LedgerOpt = None,
    driver_branch: BranchOpt = None,
    policy: PolicyOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    no_precompiled: Annotated[bool, typer.Option(
        "--no-precompiled", help="regular images (<version>-<os-tag>) instead of precompiled ones")] = False,
    driver_version: Annotated[str | None, typer.Option(
        help="full driver version for --no-precompiled [default: the branch's pinned version]")] = None,
    rules: RulesOpt = None,
    operator_version: OperatorVersionOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Work out the driver image every GPU node needs from its labels, and check it against the ledger.

    On a cluster running NVIDIA's GPU Operator, no flag is needed: each node's expectation (precompiled or not,
    repository, branch or version) comes from the NVIDIADriver whose nodeSelector picks it, else the ClusterPolicy,
    exactly as the operator derives it, and the ledger defaults to that repository. Where the operator runs (or
    would deploy) an image built for another kernel or OS than the node's, the node is `operator-mismatch`. Flags
    override the operator's objects.

    Exit 0 when every GPU node's image is present, 1 when any is missing or unknown, the operator deploys a
    mismatched image, or a driver pod runs an image built for another kernel; 2 on bad input or an unreachable
    cluster/registry.

    Examples:  gpualign check                     (a cluster with the GPU Operator)
               gpualign check --ledger registry://127.0.0.1:5000/nvidia/driver --driver-branch 580
    """
    from gpualign.audit import audit
    from gpualign.expect import from_flags, from_operator
    from gpualign.ledger import sources
    from gpualign.tags import for_operator, load_rules

    flags_given = bool(driver_branch or policy or no_precompiled or driver_version or repository)
    if not ledger and (nodes_file or flags_given):
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable)")
    branch_policy = _policy(driver_branch, policy)
    rule_set = load_rules(rules)
    available = sources.load(ledger, docker_config=docker_config) if ledger else None
    inv, view = _read(nodes_file, kubeconfig, context, selector, with_operator=True)
    config = view.config if view else None
    for unread in view.notes if view else ():
        _warn(unread)
    if not ledger and config is None:
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); without one, "
                       "check needs the GPU Operator's ClusterPolicy to name the repository, and found none")
    rule_set, version_note = for_operator(rule_set, operator_version or (config.version if config else None))
    if version_note:
        _warn(version_note)
    if flags_given or config is None:
        expect = from_flags(branch_policy, repository=_repository(repository, ledger or []),
                            precompiled=not no_precompiled, driver_version=driver_version,
                            policy_file=policy is not None)
    else:
        expect = from_operator(config)
    ledger_arg: sources.Ledger | sources.RepoLedgers
    if available is None:
        assert config is not None
        ledger_arg = sources.load_repositories([s.repository for s in config.sources
                                                if s.repository and not s.problem], docker_config=docker_config)
    else:
        ledger_arg = available
    ledger_names = list(ledger_arg.sources)
    warnings = list(config.warnings) if config else []
    result = audit(inv.nodes, ledger_arg, rule_set, expect=expect, pods=inv.pods,
                   planned=view.planned if view and config else None)
    if config and not config.nvidiadriver_mode and not flags_given:
        ostags = sorted({f.os_tag for f in result.findings if f.os_tag})
        if len(ostags) > 1:
            warnings.append(f"ClusterPolicy mode names every kernel's image with ONE OS tag, taken from whichever "
                            f"GPU node the operator lists first; this fleet has {', '.join(ostags)}: nodes of the "
                            "others get images built for another OS (use one NVIDIADriver per OS pool)")
    for w in warnings:
        _warn(w)
    if output in (Output.json, Output.yaml):
        data = result.as_dict()
        data["operator"] = None if config is None else {
            "cluster_policy": config.cluster_policy, "version": config.version,
            "mode": "nvidiadriver" if config.nvidiadriver_mode else "clusterpolicy",
            "sources": [s.origin for s in config.sources]}
        data["rules"] = {"source": rule_set.source, "operator_version": rule_set.operator_version}
        data["ledger"] = ledger_names
        notes = list(view.notes) if view else []
        data["warnings"] = notes + warnings
        emit_data(data, output)
    else:
        _check_table(result, output is Output.wide)
    if not result.clean:
        raise typer.Exit(EXIT_FINDINGS)


def plan(
    ledger: LedgerOpt = None,
    kernel: Annotated[str | None, typer.Option("--kernel", help="the kernel the nodes will run, e.g. "
                                                                 "5.15.0-125-generic")] = None,
    os_: Annotated[str | None, typer.Option("--os", help="the OS they will run, e.g. ubuntu24.04")] = None,
    driver_branch: Annotated[str | None, typer.Option("--driver-branch", help="the branch they will run")] = None,
    policy: PolicyOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    build_matrix: Annotated[bool, typer.Option(
        "--build-matrix", help="print a JSON list of images to build (DRIVER_BRANCH, KERNEL_VERSION, OS_TAG, tag)"
    )] = False,
    rules: RulesOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Before a kernel, OS or branch change: list the images it would need that the ledger lacks.

    Exit 1 when something must be built first, 0 when nothing must.

    Example:  gpualign plan -l pool=train --kernel 5.15.0-125-generic --ledger images.txt --build-matrix
    """
    from gpualign.ledger import sources
    from gpualign.plan import Change
    from gpualign.plan import plan as make_plan
    from gpualign.tags import load_rules, normalize_branch

    if not ledger:
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable)")
    if not (kernel or os_ or driver_branch):
        raise BadInput("nothing to plan: pass --kernel, --os and/or --driver-branch")
    os_id = os_version = None
    if os_:
        m = re.fullmatch(r"([a-z]+)([0-9][0-9.]*)", os_)
        if not m:
            raise BadInput(f"--os {os_!r}: expected ID followed by VERSION_ID, e.g. ubuntu24.04")
        os_id, os_version = m.groups()
    change = Change(kernel=kernel, os_id=os_id, os_version=os_version,
                    branch=normalize_branch(driver_branch) if driver_branch else None)
    rule_set = load_rules(rules)
    branch_policy = _policy(None, policy)
    available = sources.load(ledger, docker_config=docker_config)
    inv = _inventory(nodes_file, kubeconfig, context, selector, with_pods=False)
    result = make_plan(inv.nodes, change, available, rule_set, branch_policy)
    repo = _repository(repository, ledger)
    if build_matrix:
        sys.stdout.write(json.dumps([n.build_args() for n in result.to_build], indent=2) + "\n")
    elif output in (Output.json, Output.yaml):
        emit_data(result.as_dict(), output)
    else:
        if not result.needed and not result.unknown:
            stdout.print("no GPU nodes selected")
        for n in result.needed:
            mark = "[green]in ledger[/]" if n.in_ledger else "[bold red]must build[/]"
            origin = "published by NVIDIA" if n.published else "not published: build in-house"
            stdout.print(f"{mark}  {repo}:{n.tag}  ({origin})  <- {', '.join(n.nodes)}")
        for node, reason in result.unknown:
            stdout.print(f"[yellow]unknown[/]  {node}: {reason}")
        stdout.print(f"\n{len(result.to_build)} of {len(result.needed)} images must be built first")
    if result.to_build or result.unknown:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("plan")(plan)
