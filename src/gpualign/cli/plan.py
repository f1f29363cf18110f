"""`gpualign plan`: before a kernel, OS or branch change, the images it needs that the ledger lacks; for one
cluster, a dump, or several clusters at once."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli.common import report, warn
from gpualign.cli.flags import FleetReportFlags, RegistryFlags
from gpualign.cli.fleet import AllContextsOpt, ContextsOpt, RequestTimeoutOpt
from gpualign.cli.options import (
    BranchPolicyOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KernelModuleTypeOpt,
    KubeconfigOpt,
    LedgerOpt,
    NodesFileOpt,
    NoHeadersOpt,
    OldPolicyOpt,
    Output,
    OutputOpt,
    RepositoryOpt,
    RulesOpt,
    SelectorOpt,
    TrustedKeyOpt,
    trusted_keys,
)
from gpualign.cli.printers import Printers, Shown
from gpualign.model.makers import Maker

if TYPE_CHECKING:
    from gpualign.model.fleet_report import ClusterRead
    from gpualign.model.needed_images import Change


def _tonight(nodes: Any, say: Any) -> Any:
    """What Debian's archive installs next on each pool of the nodes, said per pool."""
    from gpualign.usecases import archive_next

    tonight = archive_next.read(nodes, *archive_next.debian_archive())
    for pool in tonight.pools:
        nxt = pool.next
        if nxt is None:
            say(f"{pool.name} ({len(pool.nodes)} nodes): no metapackage of the suites read follows its line")
            continue
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(pool.since)) if pool.since else "now"
        say(f"{pool.name} ({len(pool.nodes)} nodes): Debian's archive installs {nxt.release} next ({nxt.metapackage} "
            f"{nxt.version}, {nxt.suite}; first read here {since})")
    return tonight


KernelOpt = Annotated[str | None, typer.Option(
    "--kernel", metavar="KERNEL",
    help="the kernel the nodes will run, e.g. 5.15.0-125-generic; or `next`: each node's own next kernel, the "
         "one it announces (gpualign.io/kernel.next), else the one its line's metapackage installs, as Debian's "
         "archive names it now (its InRelease verified with gpgv; $GPUALIGN_DEBIAN_MIRROR for a mirror of your "
         "own); -o json then says per node whether it may reboot tonight")]
OsOpt = Annotated[str | None, typer.Option(
    "--os", metavar="OS", help="the OS they will run, e.g. ubuntu24.04 (an OS change brings its own kernel: "
                               "pass --kernel with it)")]
DriverBranchOpt = Annotated[str | None, typer.Option(
    "--driver-branch", metavar="BRANCH", help="the branch they will run, e.g. 595")]
BuildMatrixOpt = Annotated[bool, typer.Option(
    "--build-matrix", help="print the images to build as a GitHub Actions matrix: {\"include\": [{action, "
                           "DRIVER_BRANCH, KERNEL_VERSION, OS_TAG, tag, modules}]} (modules: the "
                           "kernel modules the nodes will load, open or proprietary)")]


@dataclass(frozen=True, kw_only=True)
class PlanFlags(RegistryFlags, FleetReportFlags):
    """`gpualign plan`'s flags, as given."""

    ledger: LedgerOpt
    kernel: KernelOpt
    os_: OsOpt
    driver_branch: DriverBranchOpt
    branch_policy_file: BranchPolicyOpt
    old_policy: OldPolicyOpt
    kernel_module_type: KernelModuleTypeOpt
    selector: SelectorOpt
    nodes_file: NodesFileOpt
    build_matrix: BuildMatrixOpt
    rules: RulesOpt
    repository: RepositoryOpt


def plan(
    ledger: LedgerOpt = None,
    kernel: KernelOpt = None,
    os_: OsOpt = None,
    driver_branch: DriverBranchOpt = None,
    branch_policy_file: BranchPolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    kernel_module_type: KernelModuleTypeOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    build_matrix: BuildMatrixOpt = False,
    rules: RulesOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextsOpt = None,
    all_contexts: AllContextsOpt = False,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """Before a kernel, OS or branch change: list the images it would need that the ledger lacks.

    Each image says who makes it: `mirror` (the rules say NVIDIA publishes precompiled images for that OS, kernel
    series and branch: copy it from nvcr.io, gpualign ensure), `build` (gpualign builds it: Debian 12 and 13),
    `render` (gpualign writes its recipe, to build where its distribution's archive is reachable) or `none` (no
    recipe, with why). A node the change cannot apply to (an Ubuntu kernel on a RHEL node) is listed as unknown,
    with why.

    Several clusters (--context repeated, or --all-contexts) give one plan: each image once, its nodes per cluster.

    Exit 1 when something must be mirrored or built first, or a node cannot take the change; 0 when nothing must.
    For several clusters: 4 when some cluster could not be read, 5 when that and something to do elsewhere.

    Example:

    \b
        gpualign plan -l pool=train --kernel 5.15.0-125-generic --ledger images.txt --build-matrix
    """
    run_plan(PlanFlags(**locals()))


def run_plan(f: PlanFlags) -> None:
    ledger = f.ledger
    repository = f.repository
    from gpualign.cli import fleet
    from gpualign.cli.common import say_tty
    from gpualign.cli.inputs import branch_policy, check_known_branches, module_type_flag, stdin_once
    from gpualign.loaders.rules import load_rules
    from gpualign.usecases.ledgers import load_ledger, repository_for
    from gpualign.usecases.nodes import quiet, read_nodes
    from gpualign.usecases.plan_images import PlanSetup, from_operator, operator_branches, plan_cluster

    stdin_once(ledger, f.nodes_file)
    if not (f.kernel or f.os_ or f.driver_branch or f.kernel_module_type):
        raise BadInput("nothing to plan: pass --kernel, --os, --driver-branch and/or --kernel-module-type")
    module_type_flag(f.kernel_module_type)
    if f.build_matrix and f.output is not Output.table:
        raise BadInput(f"--build-matrix prints a JSON matrix of its own: drop -o {f.output.value}")
    timeout = fleet.parse_timeout(f.request_timeout)
    if f.nodes_file and (f.all_contexts or len(set(f.context or [])) > 1):
        raise BadInput("--nodes-file reads one dump: drop --all-contexts or the extra --context")
    if not ledger and (f.nodes_file or f.all_contexts or len(set(f.context or [])) > 1):
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); only a "
                       "single cluster's GPU Operator objects can stand in for it")
    change, from_archive = _change_of(f.kernel, f.os_, f.driver_branch, f.kernel_module_type)
    rule_set = load_rules(f.rules)
    branches = branch_policy(None, f.branch_policy_file, f.old_policy)
    if change.branch:
        from gpualign.model.branches import BranchPolicy

        check_known_branches(BranchPolicy(default=change.branch), rule_set)
    # every flag is judged above, before any cluster is read
    derived_branches = None
    if not ledger:  # as check does: beside the GPU Operator, its objects name the repository and the branches
        ledger, derived_branches, repository = from_operator(f.kubeconfig, f.context[0] if f.context else None,
                                                          repository, timeout, warn)
    names = fleet.contexts(f.kubeconfig, f.context, f.all_contexts)
    if derived_branches is None and not (f.branch_policy_file or f.old_policy or change.branch or f.nodes_file) and \
            names is None and len(set(f.context or [])) <= 1:
        # --ledger given: the branches still come from where check takes them, the GPU Operator's objects
        derived_branches = operator_branches(f.kubeconfig, f.context[0] if f.context else None, timeout, warn)
    if derived_branches is not None and not (f.branch_policy_file or f.old_policy):
        branches = derived_branches
    check_known_branches(branches, rule_set)
    available = load_ledger(ledger, f.docker_config, say=say_tty, warn=warn)
    repo = repository_for(repository, ledger, warn)

    setup = PlanSetup(change=change, available=available, repository=repo, rules=rule_set, branches=branches,
                      docker_config=f.docker_config, warn=warn, trusted=trusted_keys(f.trusted_key))

    # with no branch named by a flag, a policy or the operator's objects, each node keeps the branch its driver pod
    # is deployed with, as check infers it: only then are the driver pods read
    infer = not (change.branch or branches.default or branches.rules)

    def plan_of(nodes_from: str | None, announce: bool = True) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        read = read_nodes(f.nodes_file, f.kubeconfig, nodes_from, f.selector, with_pods=infer, timeout=timeout,
                          say=say_tty if announce else quiet, warn=warn if announce else quiet)
        pools = None
        using = setup
        if from_archive:
            import dataclasses

            from gpualign.usecases import tonight as tonight_of

            archive = _tonight(read.inventory.nodes, say_tty if announce else quiet)
            pools = [p.as_dict() for p in archive.pools]
            booted = tonight_of.boots(read.inventory.nodes, archive)
            using = dataclasses.replace(setup, change=tonight_of.change_of(booted, setup.change))
        planned = plan_cluster(read, using, f.selector)
        body = planned.as_dict()
        if pools is not None:
            body["archive"] = pools
            # per node, may it reboot tonight: the verdict status --tonight, why --tonight and the controller give
            body["reboot"] = [v.as_dict() for v in tonight_of.verdicts(booted, planned.needed, True)]
        return body, planned.clean, read.source

    if names is None:
        body, clean, source = plan_of(f.context[0] if f.context else None)
        if f.build_matrix:
            _write_matrix(body["needed"])
        else:
            PLAN.print(f.output, report("PlanReport", {**source, "ledger": list(available.sources)}, body), repo,
                       no_headers=f.no_headers)
        if not clean:
            raise typer.Exit(EXIT_FINDINGS)
        return
    _report_fleet(names, plan_of, repo, f.kubeconfig, timeout, list(available.sources), f.build_matrix, f.output,
                  f.no_headers)



def _change_of(kernel: str | None, os_: str | None, driver_branch: str | None,
               kernel_module_type: str | None) -> tuple[Change, bool]:
    """The change the flags name, and whether its kernel is each node's next one from Debian's archive."""
    from gpualign.model.needed_images import Change
    from gpualign.model.tags import normalize_branch, parse_os

    os_id = os_version = None
    if os_:
        named = parse_os(os_)
        if named is None:
            raise BadInput(f"--os {os_!r}: expected ID followed by VERSION_ID, e.g. ubuntu24.04")
        os_id, os_version = named
        if not kernel:
            warn(f"--os {os_} without --kernel: the tags keep each node's current kernel, which a new OS release "
                 "replaces; pass the kernel it ships with")
    from_archive = kernel == "next"
    if from_archive and os_:
        raise BadInput("--kernel next plans each node onto its own release's next kernel: drop --os")
    return Change(kernel=None if from_archive else kernel, os_id=os_id, os_version=os_version,
                  branch=normalize_branch(driver_branch) if driver_branch else None,
                  module_type=kernel_module_type), from_archive


def _report_fleet(names: list[str], plan_of: Callable[..., tuple[dict[str, Any], bool, dict[str, Any]]],
                  repo: str, kubeconfig: str | None, timeout: float | None, ledger: list[str], build_matrix: bool,
                  output: Output, no_headers: bool) -> None:
    """Several clusters planned side by side into one plan; the fleet's exit code."""
    from gpualign.cli import fleet
    from gpualign.model.fleet_report import merge_plan

    def one(name: str) -> tuple[dict[str, Any], bool, str | None]:
        body, clean, source = plan_of(name, announce=False)
        return body, clean, source["cluster"]["server"]

    several = fleet.read_fleet(names, one, timeout, merge_plan)
    several.merged["repository"] = repo
    if build_matrix:
        _write_matrix(several.merged["needed"])
    else:
        FLEET_PLAN.print(output, several.document("FleetPlanReport", kubeconfig, ledger), repo, several.reads,
                         no_headers=no_headers)
    if several.code:
        raise typer.Exit(several.code)


def matrix(needed: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, str]]], list[str]]:
    """The GitHub Actions matrix of the images to make (in no ledger, with a maker), and a warning for each image
    left out because nothing can make it: a Job for it could only fail."""
    entries = [_matrix_entry(n) for n in needed if not n["in_ledger"] and n["action"] != Maker.NONE]
    left_out = [f"{n['tag']}: not in the matrix: {n['action_reason']}" for n in needed
                if not n["in_ledger"] and n["action"] == Maker.NONE]
    return {"include": entries}, left_out


def _write_matrix(needed: list[dict[str, Any]]) -> None:
    entries, left_out = matrix(needed)
    for line in left_out:
        warn(line)
    sys.stdout.write(json.dumps(entries, indent=2) + "\n")


def _matrix_entry(n: dict[str, Any]) -> dict[str, str]:
    return {"action": n["action"], "DRIVER_BRANCH": n["branch"], "KERNEL_VERSION": n["kernel"],
            "OS_TAG": n["os_tag"], "tag": n["tag"], "modules": n.get("modules") or "proprietary"}


def _render(needed: list[dict[str, Any]], unknown: list[dict[str, Any]], repo: str, wide: bool, no_headers: bool,
            fleet: bool) -> str:
    from gpualign.cli.table import Styled, render, use_color
    from gpualign.model.fleet_report import grouped

    cols = ["IMAGE", "LEDGER", "ACTION", "NODES"] + (["REASON"] if wide else [])
    rows: list[list[str | Styled]] = []
    for n in needed:
        ledger_cell = Styled("present", "green") if n["in_ledger"] else \
            Styled("wrong-image", "bold red") if n.get("wrong") else Styled("missing", "bold red")
        action = "-" if n["in_ledger"] else "replace" if n.get("wrong") else n["action"]
        row: list[str | Styled] = [f"{repo}:{n['tag']}", ledger_cell, action,
                                   grouped(n["clusters"]) if fleet else ",".join(n["nodes"])]
        reason = f"present but wrong: {n['wrong']}; {n['reason']}" if n.get("wrong") else n["reason"]
        rows.append(row + ([reason] if wide else []))
    text = render(cols, rows, color=use_color(), no_headers=no_headers) if rows else ""
    for u in unknown:
        text += f"cannot plan {u['cluster'] + ':' if fleet else ''}{u['node']}: {u['reason']}\n"
    to_build = [n for n in needed if not n["in_ledger"]]
    wrong = sum(1 for n in to_build if n.get("wrong"))
    count = {a: sum(1 for n in to_build if n["action"] == a and not n.get("wrong"))
             for a in ("mirror", "build", "render", "none")}
    parts = [f"{count['mirror']} to mirror from NVIDIA", f"{count['build']} for gpualign to build"]
    if count["render"]:
        parts.append(f"{count['render']} to build from gpualign's recipe (gpualign ensure TAG --render DIR)")
    if count["none"]:
        parts.append(f"{count['none']} gpualign cannot make (-o wide says why)")
    if wrong:
        parts.append(f"{wrong} present but wrong, to make again: gpualign ensure TAG --replace-wrong")
    return text + f"\n{len(to_build)} of {len(needed)} images must be in the ledger first ({', '.join(parts)})\n"


def register(app: typer.Typer) -> None:
    app.command("plan", short_help="Before a kernel, OS or branch change: the images to mirror or build first.")(
        plan)


def _plan_table(document: dict[str, Any], shown: Shown, repo: str) -> None:
    sys.stdout.write(_render(document["needed"], document["unknown"], repo, shown.wide, shown.no_headers,
                             fleet=False))


def _fleet_plan_table(document: dict[str, Any], shown: Shown, repo: str, reads: list[ClusterRead]) -> None:
    """The fleet's plan, then a line for each cluster that could not be read."""
    text = _render(document["needed"], document["unknown"], repo, shown.wide, shown.no_headers, fleet=True)
    for r in reads:
        if not r.readable:
            text += f"{r.name}: unreadable: {r.error}\n"
    sys.stdout.write(text)


PLAN = Printers(command="plan", table=_plan_table)
FLEET_PLAN = Printers(command="plan", table=_fleet_plan_table)
