"""`gpualign check`: which image every GPU node needs, and whether the ledger has it; for one cluster, a dump, or
several clusters at once (one report)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli.common import report, warn
from gpualign.cli.flags import FleetReportFlags, RegistryFlags
from gpualign.cli.fleet import AllContextsOpt, ContextsOpt, RequestTimeoutOpt
from gpualign.cli.options import (
    BranchOpt,
    BranchPolicyOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KernelModuleTypeOpt,
    KubeconfigOpt,
    LedgerOpt,
    NodesFileOpt,
    NoHeadersOpt,
    OldPolicyOpt,
    OperatorVersionOpt,
    Output,
    OutputOpt,
    RepositoryOpt,
    RulesOpt,
    SelectorOpt,
    TrustedKeyOpt,
    trusted_keys,
)
from gpualign.cli.printers import Printers, Shown
from gpualign.model.node_status import Status

if TYPE_CHECKING:
    from gpualign.model.fleet_report import ClusterRead
    from gpualign.usecases.check import Setup
    from gpualign.usecases.nodes import Reading

STATUS_STYLE = {"present": "green", "missing": "bold red", "unknown": "yellow", "host-managed": "cyan",
                "operator-mismatch": "bold magenta", "wrong-image": "bold red"}


def render_check(nodes: list[dict[str, Any]], missing: list[dict[str, Any]], wide: bool, no_headers: bool,
                 fleet: bool) -> str:
    """The check table (with CLUSTER first for a fleet), then the missing images and what to do about each."""
    from gpualign.cli.table import Styled, render, use_color
    from gpualign.model.fleet_report import grouped

    cols = (["CLUSTER"] if fleet else []) + ["NODE", "OS", "KERNEL", "BRANCH", "REQUIRED TAG", "STATUS",
                                              "DRIVER POD"]
    if wide:
        cols += ["SOURCE", "ACTION", "DRIVER", "MODULES", "POD IMAGE TAG", "REASON"]
    color = use_color()
    rows = []
    for n in nodes:
        pod = n["driver_pod"]
        status = n["status"] + ("?" if n.get("verified") is False else "")
        pod_state = pod["state"] if pod else "-"
        if color:  # styled cells only where they are painted: plain rows are laid out in one join
            style = STATUS_STYLE.get(n["status"], "")
            if n["status"] == Status.PRESENT and (n.get("driver_pod_failing") or n.get("verified") is False):
                style = "yellow"  # in the ledger, but its driver is not coming up, or its modules could not be checked
            status = Styled(status, style)
            if pod:
                pod_state = Styled(pod_state, "bold red" if n.get("driver_pod_failing") else "")
        row: list[str | Styled] = ([n["cluster"]] if fleet else []) + [
            n["name"], n["os_tag"] or "-", n["kernel"] or "-", n["branch"] or "-", n["tag"] or "-", status, pod_state]
        if wide:
            action = n["action"] or "-"
            row += [n["source"] or "-", action, n["driver"] or "-", n.get("modules") or "-",
                    pod["tag"] if pod and pod["tag"] else "-",
                    n["reason"]]
        rows.append(row)
    text = render(cols, rows, color=color, no_headers=no_headers)
    if missing:
        where = [grouped(m["clusters"]) if fleet else ",".join(m["nodes"]) for m in missing]
        text += "\n" + render(["ACTION", "MISSING IMAGE", "NODES"],
                              [[m["action"], m["image"], w] for m, w in zip(missing, where, strict=True)],
                              no_headers=no_headers)
    return text


def summary_line(s: dict[str, int]) -> str:
    return (f"{s['gpu_nodes']} GPU nodes: {s['present']} present, {s['missing']} missing, {s['unknown']} unknown, "
            f"{s['host_managed']} host-managed"
            + (f", {s['operator_mismatch']} where the operator deploys a mismatched image"
               if s["operator_mismatch"] else "")
            + (f", {s['pod_kernel_mismatch']} driver pods built for another kernel" if s["pod_kernel_mismatch"]
               else "")
            + (f", {s['wrong_image'] - s.get('unsigned', 0)} present but wrong (what its nodes cannot load: -o wide "
               "says why)" if s.get("wrong_image", 0) - s.get("unsigned", 0) > 0 else "")
            + (f", {s['unsigned']} present but unsigned (no signature by a trusted key over its digest: -o wide "
               "names the image)" if s.get("unsigned") else "")
            + (f"; {s['missing_images']} image(s) missing from the ledger (see below)"
               if s.get("missing_images") and s.get("missing_images") != s["missing"] else "")
            + (f"; {s['driver_pod_failing']} driver pod(s) failing (no driver on the node)"
               if s.get("driver_pod_failing") else "")
            + (f"; {s['unverified']} present image(s) gpualign cannot vouch for: unverified, marked present? "
               "(-o wide says why)"
               if s.get("unverified") else ""))


NoPrecompiledOpt = Annotated[bool, typer.Option(
    "--no-precompiled", help="regular images (<version>-<os-tag>), which compile the driver when the pod "
                             "starts, instead of precompiled ones (<branch>-<kernel>-<os-tag>)")]
DriverVersionOpt = Annotated[str | None, typer.Option(
    "--driver-version", metavar="VERSION",
    help="full driver version for --no-precompiled, e.g. 580.95.05 [default: the branch's pinned "
         "version]")]
VerifyModulesOpt = Annotated[bool, typer.Option(
    "--verify-modules",
    help="also pull each present image's kernel modules and check them as the node's kernel would at load "
         "(version magic, every symbol CRC against its Module.symvers), for nodes whose kernel has headers in "
         "Debian's archive (Debian 12 and 13); an image that would be refused is wrong-image, naming the module "
         "and symbol")]


@dataclass(frozen=True, kw_only=True)
class CheckFlags(RegistryFlags, FleetReportFlags):
    """`gpualign check`'s flags, as given."""

    ledger: LedgerOpt
    driver_branch: BranchOpt
    branch_policy_file: BranchPolicyOpt
    old_policy: OldPolicyOpt
    kernel_module_type: KernelModuleTypeOpt
    selector: SelectorOpt
    nodes_file: NodesFileOpt
    no_precompiled: NoPrecompiledOpt
    driver_version: DriverVersionOpt
    rules: RulesOpt
    operator_version: OperatorVersionOpt
    repository: RepositoryOpt
    verify_modules: VerifyModulesOpt


def check(
    ledger: LedgerOpt = None,
    driver_branch: BranchOpt = None,
    branch_policy_file: BranchPolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    kernel_module_type: KernelModuleTypeOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    no_precompiled: NoPrecompiledOpt = False,
    driver_version: DriverVersionOpt = None,
    rules: RulesOpt = None,
    operator_version: OperatorVersionOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    verify_modules: VerifyModulesOpt = False,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextsOpt = None,
    all_contexts: AllContextsOpt = False,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """Work out the driver image every GPU node needs from its labels, and check it against the ledger.

    On a cluster running NVIDIA's GPU Operator, no flag is needed: each node's expectation (precompiled or not,
    repository, branch or version) comes from the NVIDIADriver whose nodeSelector picks it, else the ClusterPolicy,
    exactly as the operator derives it, and the ledger defaults to that repository. Where the operator runs (or
    would deploy) an image built for another kernel or OS than the node's, the node is `operator-mismatch`. Flags
    override the operator's objects.

    Several clusters (--context repeated, or --all-contexts) are read at once into one report: a CLUSTER column,
    each missing image once with its nodes per cluster, a summary per cluster and in total. A cluster that cannot
    be read is named with its reason, and the others are still reported.

    Exit 0 when every GPU node's image is present; 1 when any is missing or unknown, the operator deploys a
    mismatched image, a driver pod runs an image built for another kernel, or -l matches no GPU node; 2 on bad
    input or an unreachable cluster or registry. For several clusters: 4 when some cluster could not be read, 5
    when that and findings in another.

    Examples:

    \b
        gpualign check                                   # a cluster with the GPU Operator
        gpualign check --ledger registry://127.0.0.1:5000/nvidia/driver --driver-branch 580
        kubectl get nodes -o json | gpualign check --nodes-file - --ledger images.txt --driver-branch 580
        gpualign check --all-contexts --request-timeout 20s      # every cluster of $KUBECONFIG, one report
    """
    run_check(CheckFlags(**locals()))


def run_check(f: CheckFlags) -> None:
    from gpualign.cli import fleet
    from gpualign.cli.common import say_tty
    from gpualign.cli.inputs import (
        branch_policy,
        check_known_branches,
        driver_version_flag,
        module_type_flag,
        stdin_once,
    )
    from gpualign.usecases.nodes import Reading

    stdin_once(f.ledger, f.nodes_file)
    driver_version_flag(f.driver_version, f.no_precompiled, f.driver_branch)
    module_type_flag(f.kernel_module_type)
    timeout = fleet.parse_timeout(f.request_timeout)
    if f.nodes_file and (f.all_contexts or len(set(f.context or [])) > 1):
        raise BadInput("--nodes-file reads one dump: drop --all-contexts or the extra --context")
    names = fleet.contexts(f.kubeconfig, f.context, f.all_contexts)
    policy_given = f.branch_policy_file is not None or f.old_policy is not None
    flags_given = bool(f.driver_branch or policy_given or f.no_precompiled or f.driver_version or f.repository or
                       f.kernel_module_type)
    if not f.ledger and (f.nodes_file or flags_given):
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable)"
                       + ("" if f.nodes_file else "; flags such as --driver-branch override the GPU Operator's "
                          "objects, and with them the repository they name, so the ledger must be named too"))
    branches = branch_policy(f.driver_branch, f.branch_policy_file, f.old_policy)  # a wrong flag never starts a read
    if f.kernel_module_type:
        import dataclasses

        branches = dataclasses.replace(branches, default_module_type=f.kernel_module_type)
    # One cluster (or dump): its read begins now, and its LISTs are on the wire while the rules and ledgers load.
    reading = Reading(f.nodes_file, f.kubeconfig, f.context[0] if f.context else None, f.selector, with_operator=True,
                      timeout=timeout, say=say_tty, warn=warn, stream=f.nodes_file is None) if names is None else None
    if reading is not None:
        reading.wait_connected()  # its LISTs go out first; what loads below then overlaps their transfer
    from gpualign.loaders.rules import load_rules  # (the rules' reader, the audit: imported beside the LISTs)
    from gpualign.usecases.check import Setup
    from gpualign.usecases.ledgers import load_ledger

    rule_set = load_rules(f.rules)
    check_known_branches(branches, rule_set)
    setup = Setup(branches=branches, rules=rule_set,
                  available=load_ledger(f.ledger, f.docker_config, say=say_tty, warn=warn) if f.ledger else None,
                  ledger=list(f.ledger or []), flags_given=flags_given, policy_given=policy_given,
                  repository=f.repository,
                  precompiled=not f.no_precompiled, driver_version=f.driver_version,
                  operator_version=f.operator_version, docker_config=f.docker_config, verify_modules=f.verify_modules,
                  warn=warn, trusted=trusted_keys(f.trusted_key))
    if reading is not None:  # one cluster, or a dump
        _report_one(reading, setup, f.selector, f.output, f.no_headers)
    else:
        assert names is not None
        _report_fleet(names, setup, f.selector, f.kubeconfig, timeout, f.output, f.no_headers)



def _report_one(reading: Reading, setup: Setup, selector: str | None, output: Output, no_headers: bool) -> None:
    """One cluster's (or a dump's) report, each page of nodes decided as it arrives; exit 1 on findings."""
    from gpualign.base.collector import keep
    from gpualign.usecases.check import check_cluster, load_deciders, stream
    from gpualign.usecases.nodes import no_gpu_nodes

    load_deciders(setup)  # while its LISTs are on the wire
    streamed = stream(reading, setup)  # each page decided as it arrives (None for a dump)
    read = reading.result()
    for note in read.view.notes if read.view else ():
        warn(note)  # before anything can fail on it: "no ledger" is explained by "not allowed to read …"
    checked = check_cluster(read, setup, streamed)
    for w in checked.warnings:
        warn(w)
    body = checked.as_dict()
    if not read.inventory.nodes:
        body["warnings"].append(no_gpu_nodes(selector))  # said on stderr as it was read
    CHECK.print(output, report("CheckReport", {**read.source, "ledger": body["ledger"]}, body), no_headers=no_headers)
    keep(reading, read, checked, body)  # freed by the OS at exit, not one by one as check returns
    if not checked.audit.clean or (selector and not read.inventory.nodes):
        raise typer.Exit(EXIT_FINDINGS)


def _report_fleet(names: list[str], setup: Setup, selector: str | None, kubeconfig: str | None,
                  timeout: float | None, output: Output, no_headers: bool) -> None:
    """Several clusters read side by side into one report; the fleet's exit code."""
    from gpualign.cli import fleet
    from gpualign.model.fleet_report import merge_check
    from gpualign.usecases.check import check_cluster, stream
    from gpualign.usecases.nodes import Reading, no_gpu_nodes

    def one(name: str) -> tuple[dict[str, Any], bool, str | None]:
        reading = Reading(None, kubeconfig, name, selector, with_operator=True, timeout=timeout, stream=True)
        streamed = stream(reading, setup)  # each page decided as it arrives, in this cluster's own thread
        read = reading.result()
        checked = check_cluster(read, setup, streamed)
        body = checked.as_dict()
        if not read.inventory.nodes:
            body["warnings"].append(no_gpu_nodes(selector))
        clean = checked.audit.clean and not (selector and not read.inventory.nodes)
        return body, clean, read.source["cluster"]["server"]

    several = fleet.read_fleet(names, one, timeout, merge_check)
    FLEET_CHECK.print(output, several.document("FleetCheckReport", kubeconfig, setup.ledger), several.reads,
                      no_headers=no_headers)
    if several.code:
        raise typer.Exit(several.code)


def register(app: typer.Typer) -> None:
    app.command("check", short_help="Which driver image every GPU node needs, and whether the ledger has it.")(check)


def _check_table(document: dict[str, Any], shown: Shown) -> None:
    """One cluster's check table, its summary and the hint to -o wide; "No resources found" on stderr without nodes."""
    hint = "" if shown.wide or not any(n["status"] != Status.PRESENT for n in document["nodes"]) else \
        "  (-o wide for the reasons)"
    if document["nodes"]:
        text = render_check(document["nodes"], document["missing"], shown.wide, shown.no_headers, fleet=False)
        sys.stdout.write(text + "\n" + summary_line(document["summary"]) + hint + "\n")
    else:  # as kubectl says it, on stderr, rather than a header over nothing
        sys.stdout.flush()
        print("No resources found", file=sys.stderr)
        sys.stdout.write(summary_line(document["summary"]) + "\n")


def _fleet_check_table(document: dict[str, Any], shown: Shown, reads: list[ClusterRead]) -> None:
    """The fleet's check table, a summary line per cluster (or why it could not be read) and the total."""
    summary = document["summary"]
    text = render_check(document["nodes"], document["missing"], shown.wide, shown.no_headers, fleet=True) + "\n"
    for r in reads:
        text += f"{r.name}: " + (summary_line(summary["clusters"][r.name]) if r.readable
                                 else f"unreadable: {r.error}") + "\n"
    text += f"total: {summary_line(summary['total'])}" if summary["clusters"] else "total: no cluster could be read"
    unreadable = summary["unreadable"]
    sys.stdout.write(text + (f"; {len(unreadable)} of {len(reads)} clusters unreadable" if unreadable else "") + "\n")


CHECK = Printers(command="check", table=_check_table)
FLEET_CHECK = Printers(command="check", table=_fleet_check_table)
