"""`gpualign check` (which image every GPU node needs, and is it in the ledger), `gpualign plan` (what must be
built before a kernel, OS or branch change) and `gpualign rules` (the naming rules both follow)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpualign.cli.common import emit_data, report, warn
from gpualign.cli.options import (
    BranchOpt,
    BranchPolicyOpt,
    ContextOpt,
    DockerConfigOpt,
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
)
from gpualign.errors import EXIT_FINDINGS, BadInput

if TYPE_CHECKING:  # imported lazily at run time: each command loads only what it uses
    from gpualign.audit import Audit
    from gpualign.branches import BranchPolicy
    from gpualign.tags import Rules


def branch_policy(branch: str | None, policy: Path | None, old_policy: Path | None = None) -> BranchPolicy:
    """--driver-branch, or --branch-policy FILE (--policy is its deprecated spelling)."""
    from gpualign.branches import BranchPolicy, load_policy
    from gpualign.tags import normalize_branch

    if old_policy is not None:
        warn("--policy is deprecated for this command: use --branch-policy (the same file)")
        if policy is not None:
            raise BadInput("--policy and --branch-policy name the same file: pass --branch-policy only")
        policy = old_policy
    if branch and policy:
        raise BadInput("--driver-branch and --branch-policy are exclusive: use one")
    if policy:
        return load_policy(policy)
    return BranchPolicy(default=normalize_branch(branch) if branch else None)


def check_known_branches(policy: BranchPolicy, rules: Rules) -> None:
    """A warning for a branch the rules do not know (nothing would be published for it, nor pinned)."""
    known = sorted(rules.published_branches | set(rules.branches), key=int)
    for branch in sorted(policy.branches):
        if branch not in known:
            warn(f"driver branch {branch} is not one the rules know ({', '.join(known)}): every image for it "
                 "counts as in-house")


def repository_for(explicit: str | None, ledgers: list[str]) -> str:
    from gpualign.ledger.sources import is_registry

    if explicit:
        return explicit.rstrip("/")
    for source in ledgers:
        if is_registry(source):
            from gpualign.ledger.registry import parse_ref

            return parse_ref(source).image
    return "nvcr.io/nvidia/driver"


def _stdin_once(ledger: list[str] | None, nodes_file: Path | None) -> None:
    if (ledger or []).count("-") + (1 if str(nodes_file) == "-" else 0) > 1:
        raise BadInput("stdin (-) can feed one input only: --nodes-file - or one --ledger -")


STATUS_STYLE = {"present": "green", "missing": "bold red", "unknown": "yellow", "host-managed": "cyan",
                "operator-mismatch": "bold magenta"}


def _check_table(result: Audit, wide: bool, no_headers: bool) -> None:
    from gpualign.cli.table import Styled, render, use_color

    cols = ["NODE", "OS", "KERNEL", "BRANCH", "REQUIRED TAG", "STATUS", "DRIVER POD"]
    if wide:
        cols += ["SOURCE", "ACTION", "DRIVER", "POD IMAGE TAG", "REASON"]
    rows = []
    for f in result.findings:
        pod = f.driver_pod
        row: list[str | Styled] = [f.name, f.os_tag or "-", f.kernel or "-", f.branch or "-", f.tag or "-",
                                   Styled(f.status, STATUS_STYLE.get(f.status, "")), pod.state if pod else "-"]
        if wide:
            action = f.action if f.status in ("missing", "operator-mismatch") and f.action else "-"
            row += [f.source or "-", action, f.driver or "-", pod.tag if pod and pod.tag else "-",
                    f.reason]
        rows.append(row)
    color = use_color()
    out = [render(cols, rows, color=color, no_headers=no_headers)]
    if result.missing:
        out.append("\n" + render(["ACTION", "MISSING IMAGE", "NODES"],
                                 [[action, image, ",".join(nodes)]
                                  for _tag, image, nodes, action in result.missing_actions()],
                                 no_headers=no_headers))
    s = result.summary()
    out.append(f"\n{s['gpu_nodes']} GPU nodes: {s['present']} present, {s['missing']} missing, "
               f"{s['unknown']} unknown, {s['host_managed']} host-managed"
               + (f", {s['operator_mismatch']} where the operator deploys a mismatched image"
                  if s["operator_mismatch"] else "")
               + (f", {s['pod_kernel_mismatch']} driver pods built for another kernel"
                  if s["pod_kernel_mismatch"] else "")
               + ("" if wide or not any(f.status != "present" for f in result.findings)
                  else "  (-o wide for the reasons)") + "\n")
    sys.stdout.write("".join(out))


def check(
    ledger: LedgerOpt = None,
    driver_branch: BranchOpt = None,
    branch_policy_file: BranchPolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    no_precompiled: Annotated[bool, typer.Option(
        "--no-precompiled", help="regular images (<version>-<os-tag>), which compile the driver when the pod "
                                 "starts, instead of precompiled ones (<branch>-<kernel>-<os-tag>)")] = False,
    driver_version: Annotated[str | None, typer.Option(
        "--driver-version", metavar="VERSION",
        help="full driver version for --no-precompiled, e.g. 580.95.05 [default: the branch's pinned "
             "version]")] = None,
    rules: RulesOpt = None,
    operator_version: OperatorVersionOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Work out the driver image every GPU node needs from its labels, and check it against the ledger.

    On a cluster running NVIDIA's GPU Operator, no flag is needed: each node's expectation (precompiled or not,
    repository, branch or version) comes from the NVIDIADriver whose nodeSelector picks it, else the ClusterPolicy,
    exactly as the operator derives it, and the ledger defaults to that repository. Where the operator runs (or
    would deploy) an image built for another kernel or OS than the node's, the node is `operator-mismatch`. Flags
    override the operator's objects.

    Exit 0 when every GPU node's image is present; 1 when any is missing or unknown, the operator deploys a
    mismatched image, a driver pod runs an image built for another kernel, or -l matches no GPU node; 2 on bad
    input or an unreachable cluster or registry.

    Examples:

    \b
        gpualign check                                   # a cluster with the GPU Operator
        gpualign check --ledger registry://127.0.0.1:5000/nvidia/driver --driver-branch 580
        kubectl get nodes -o json | gpualign check --nodes-file - --ledger images.txt --driver-branch 580
    """
    from gpualign.audit import audit
    from gpualign.cli.source import load_ledger, read_nodes
    from gpualign.expect import from_flags, from_operator
    from gpualign.ledger import sources
    from gpualign.tags import for_operator, load_rules
    from gpualign.version import DriverVersion

    _stdin_once(ledger, nodes_file)
    if driver_version is not None:
        if not no_precompiled:
            raise BadInput("--driver-version names a regular image's version: add --no-precompiled (precompiled "
                           "tags carry the branch only)")
        try:
            DriverVersion.parse(driver_version)
        except ValueError:
            raise BadInput(f"--driver-version {driver_version!r}: expected a driver version such as "
                           "580.95.05") from None
    policy_given = branch_policy_file is not None or old_policy is not None
    flags_given = bool(driver_branch or policy_given or no_precompiled or driver_version or repository)
    if not ledger and (nodes_file or flags_given):
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable)")
    pools = branch_policy(driver_branch, branch_policy_file, old_policy)
    rule_set = load_rules(rules)
    check_known_branches(pools, rule_set)
    available = load_ledger(ledger, docker_config) if ledger else None
    read = read_nodes(nodes_file, kubeconfig, context, selector, with_operator=True)
    inv, view = read.inventory, read.view
    config = view.config if view else None
    for unread in view.notes if view else ():
        warn(unread)
    if not ledger and config is None:
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); without one, "
                       "check needs the GPU Operator's ClusterPolicy to name the repository, and found none")
    rule_set, version_note = for_operator(rule_set, operator_version or (config.version if config else None))
    if version_note:
        warn(version_note)
    if flags_given or config is None:
        expect = from_flags(pools, repository=repository_for(repository, ledger or []),
                            precompiled=not no_precompiled, driver_version=driver_version,
                            policy_file=policy_given)
    else:
        expect = from_operator(config)
    ledger_arg: sources.Ledger | sources.RepoLedgers
    if available is None:
        assert config is not None
        ledger_arg = sources.load_repositories([s.repository for s in config.sources
                                                if s.repository and not s.problem], docker_config=docker_config)
    else:
        ledger_arg = available
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
        warn(w)
    if output in (Output.json, Output.yaml):
        data = result.as_dict()
        data["operator"] = None if config is None else {
            "cluster_policy": config.cluster_policy, "version": config.version,
            "mode": "nvidiadriver" if config.nvidiadriver_mode else "clusterpolicy",
            "sources": [s.origin for s in config.sources]}
        data["rules"] = {"source": rule_set.source, "operator_version": rule_set.operator_version}
        data["ledger"] = list(ledger_arg.sources)
        data["warnings"] = (list(view.notes) if view else []) + warnings
        emit_data(report("CheckReport", {**read.source, "ledger": data["ledger"]}, data), output)
    else:
        _check_table(result, output is Output.wide, no_headers)
    if not result.clean or (selector and not inv.nodes):
        raise typer.Exit(EXIT_FINDINGS)


def plan(
    ledger: LedgerOpt = None,
    kernel: Annotated[str | None, typer.Option(
        "--kernel", metavar="KERNEL", help="the kernel the nodes will run, e.g. 5.15.0-125-generic")] = None,
    os_: Annotated[str | None, typer.Option(
        "--os", metavar="OS", help="the OS they will run, e.g. ubuntu24.04 (an OS change brings its own kernel: "
                                   "pass --kernel with it)")] = None,
    driver_branch: Annotated[str | None, typer.Option(
        "--driver-branch", metavar="BRANCH", help="the branch they will run, e.g. 595")] = None,
    branch_policy_file: BranchPolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    selector: SelectorOpt = None,
    nodes_file: NodesFileOpt = None,
    build_matrix: Annotated[bool, typer.Option(
        "--build-matrix", help="print the images to build as a GitHub Actions matrix: {\"include\": [{action, "
                               "DRIVER_BRANCH, KERNEL_VERSION, OS_TAG, tag}]}")] = False,
    rules: RulesOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Before a kernel, OS or branch change: list the images it would need that the ledger lacks.

    Each image is either `mirror` (the rules say NVIDIA publishes precompiled images for that OS, kernel series and
    branch: copy it from nvcr.io after checking the tag on NGC) or `build` (NVIDIA publishes none: build it
    in-house). A node the change cannot apply to (an Ubuntu kernel on a RHEL node) is listed as unknown, with why.

    Exit 1 when something must be mirrored or built first, or a node cannot take the change; 0 when nothing must.

    Example:

    \b
        gpualign plan -l pool=train --kernel 5.15.0-125-generic --ledger images.txt --build-matrix
    """
    from gpualign.cli.source import load_ledger, read_nodes
    from gpualign.plan import Change
    from gpualign.plan import plan as make_plan
    from gpualign.tags import load_rules, normalize_branch

    _stdin_once(ledger, nodes_file)
    if not ledger:
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable)")
    if not (kernel or os_ or driver_branch):
        raise BadInput("nothing to plan: pass --kernel, --os and/or --driver-branch")
    if build_matrix and output is not Output.table:
        raise BadInput(f"--build-matrix prints a JSON matrix of its own: drop -o {output.value}")
    os_id = os_version = None
    if os_:
        m = re.fullmatch(r"([a-z]+)([0-9][0-9.]*)", os_)
        if not m:
            raise BadInput(f"--os {os_!r}: expected ID followed by VERSION_ID, e.g. ubuntu24.04")
        os_id, os_version = m.groups()
        if not kernel:
            warn(f"--os {os_} without --kernel: the tags keep each node's current kernel, which a new OS release "
                 "replaces; pass the kernel it ships with")
    change = Change(kernel=kernel, os_id=os_id, os_version=os_version,
                    branch=normalize_branch(driver_branch) if driver_branch else None)
    rule_set = load_rules(rules)
    pools = branch_policy(None, branch_policy_file, old_policy)
    check_known_branches(pools, rule_set)
    if change.branch:
        from gpualign.branches import BranchPolicy

        check_known_branches(BranchPolicy(default=change.branch), rule_set)
    available = load_ledger(ledger, docker_config)
    read = read_nodes(nodes_file, kubeconfig, context, selector, with_pods=False)
    repo = repository_for(repository, ledger)
    result = make_plan(read.inventory.nodes, change, available.for_repository(repo), rule_set, pools)
    if build_matrix:
        sys.stdout.write(json.dumps({"include": [n.build_args() for n in result.to_build]}, indent=2) + "\n")
    elif output in (Output.json, Output.yaml):
        body = result.as_dict()
        body["repository"] = repo
        emit_data(report("PlanReport", {**read.source, "ledger": list(available.sources)}, body), output)
    else:
        from gpualign.cli.table import Styled, render, use_color

        cols = ["IMAGE", "LEDGER", "ACTION", "NODES"] + (["REASON"] if output is Output.wide else [])
        rows: list[list[str | Styled]] = []
        for n in result.needed:
            row: list[str | Styled] = [f"{repo}:{n.tag}", Styled("present", "green") if n.in_ledger
                                       else Styled("missing", "bold red"), "-" if n.in_ledger else n.action,
                                       ",".join(n.nodes)]
            rows.append(row + ([n.reason] if output is Output.wide else []))
        text = render(cols, rows, color=use_color(), no_headers=no_headers) if rows else ""
        for node, reason in result.unknown:
            text += f"cannot plan {node}: {reason}\n"
        mirror = sum(1 for n in result.to_build if n.action == "mirror")
        text += (f"\n{len(result.to_build)} of {len(result.needed)} images must be in the ledger first "
                 f"({mirror} to mirror from NVIDIA, {len(result.to_build) - mirror} to build in-house)\n")
        sys.stdout.write(text)
    if result.to_build or result.unknown or (selector and not read.inventory.nodes):
        raise typer.Exit(EXIT_FINDINGS)


def rules_cmd(rules: RulesOpt = None) -> None:
    """Print the image naming rules check and plan follow: the built-in ones, or with --rules FILE, the result of
    overriding them (each section the file gives replaces the built-in section).

    Example:

    \b
        gpualign rules > my-rules.yaml      # edit a section, then: gpualign check --rules my-rules.yaml …
    """
    from importlib import resources

    if rules is None:
        sys.stdout.write(resources.files("gpualign.rules").joinpath("driver_images.yaml").read_text())
        return
    from gpualign.tags import load_rules, merged_rules

    load_rules(rules)  # validated as check would
    emit_data(merged_rules(rules), Output.yaml)


def register(app: typer.Typer) -> None:
    app.command("check", short_help="Which driver image every GPU node needs, and whether the ledger has it.")(check)
    app.command("plan", short_help="Before a kernel, OS or branch change: the images to mirror or build first.")(
        plan)
    app.command("rules", short_help="Print the image naming rules check and plan follow.")(rules_cmd)
