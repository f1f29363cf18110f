"""`gpualign upgrade`, `gpualign status` and `gpualign why NODE`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli.common import progress, report, stdout, warn
from gpualign.cli.fleet import RequestTimeoutOpt
from gpualign.cli.options import (
    ContextOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    LedgerOpt,
    Output,
    OutputOpt,
    RulesOpt,
    SelectorOpt,
    SignCertOpt,
    SignKeyOpt,
    SignSecretOpt,
    TrustedKeyOpt,
    trusted_keys,
)
from gpualign.cli.printers import Printers, Shown
from gpualign.model.image_ref import tag_of

if TYPE_CHECKING:  # imported lazily at run time: `status` and `why` never load the executor
    from rich.table import Table

    from gpualign.ensure.sign import SigningKey
    from gpualign.upgrade.preflight import Preflight
    from gpualign.upgrade.run import Outcome
    from gpualign.upgrade.snapshot import Snapshot
    from gpualign.upgrade.upgrade_policy import UpgradePolicy
    from gpualign.usecases.upgrade_walk import Prepared, UpgradeRequest, UpgradeSession

ToBranchOpt = Annotated[str | None, typer.Option(
    "--to-branch", metavar="BRANCH",
    help="precompiled branch to move to; each node's target tag comes from its labels. Without it, the target is "
         "each driver DaemonSet's current template (controller-revision-hash)")]


def _reporter(node: str, message: str) -> None:
    """Off a terminal: one plain line per transition, for logs and CI."""
    print(f"{datetime.now():%H:%M:%S} {node}: {message}", file=sys.stderr, flush=True)


def _policy(policy_file: Path | None, max_parallel: int | None, max_unavailable: str | None,
            drain: bool | None, timeout: int | None, failed_frees_slot: bool,
            admission: str | None = None, force: bool = False, delete_empty_dir: bool = False) -> UpgradePolicy:
    import dataclasses

    from gpualign.upgrade import upgrade_policy as pol

    if max_parallel is not None and max_parallel < 0:
        raise BadInput(f"--max-parallel {max_parallel}: expected 0 (any) or more")

    p = pol.load(policy_file) if policy_file else pol.UpgradePolicy()
    if admission is not None:
        if admission not in pol.ADMISSIONS:
            raise BadInput(f"--admission {admission!r}: expected {' or '.join(pol.ADMISSIONS)}")
        p = dataclasses.replace(p, admission=admission)
    if max_parallel is not None:
        p = dataclasses.replace(p, max_parallel_upgrades=max_parallel)
    if max_unavailable is not None:
        pol.from_dict({"maxUnavailable": int(max_unavailable) if max_unavailable.isdigit() else max_unavailable},
                      "--max-unavailable")
        p = dataclasses.replace(p, max_unavailable=max_unavailable)
    if failed_frees_slot:
        p = dataclasses.replace(p, failed_nodes_hold_slots=False)
    if drain is not None:
        p = dataclasses.replace(p, drain=dataclasses.replace(p.drain, enable=drain))
    if force:  # as kubectl drain --force: pods no controller recreates may be deleted (and are lost)
        p = dataclasses.replace(p, pod_deletion=dataclasses.replace(p.pod_deletion, force=True),
                                drain=dataclasses.replace(p.drain, force=True))
    if delete_empty_dir:
        p = dataclasses.replace(p, pod_deletion=dataclasses.replace(p.pod_deletion, delete_empty_dir=True),
                                drain=dataclasses.replace(p.drain, delete_empty_dir=True))
    if timeout is not None:
        if timeout < 1:
            raise BadInput("--eviction-timeout: expected seconds >= 1")
        p = dataclasses.replace(p, pod_deletion=dataclasses.replace(p.pod_deletion, timeout_seconds=timeout),
                                drain=dataclasses.replace(p.drain, timeout_seconds=timeout))
    return p


def _admission(snap: Snapshot, pol: UpgradePolicy) -> tuple[list[list[str]], dict[str, str]]:
    """The admission rounds, and each node held and why (in words)."""
    from gpualign.upgrade.planner import admission_order

    rounds, held = admission_order([n.view for n in snap.nodes.values()], pol, snap.budgets)
    return rounds, {node: a.reason for node, a in held.items()}


def _print_order(rounds: list[list[str]], held: dict[str, str], pol: UpgradePolicy) -> None:
    how = ("PDB-aware: a node is cordoned only when its evictions can go one after another now"
           if pol.admission == "pdb-aware" else "the operator's: by name, whatever the PDBs say")
    stdout.print(f"[bold]order[/bold] ({how}; maxParallelUpgrades {pol.max_parallel_upgrades or 'any'}):")
    for i, names in enumerate(rounds, 1):
        stdout.print(f"  {i}. {', '.join(names)}")
    for node, reason in sorted(held.items()):
        stdout.print(f"  [yellow]held[/]: {node}: {reason}")


def _ensure_missing(ledger: list[str], tags: list[str], dry_run: bool, docker_config: Path | None,
                    signing: SigningKey | None = None, secure_boot: dict[str, list[str]] | None = None,
                    trusted: tuple[Any, ...] = ()) -> None:
    """--ensure: the missing target images, ensured into the one registry ledger before the walk (signed with
    `signing`; an image a Secure Boot node needs is never built unsigned)."""
    import os

    from gpualign.base.errors import GpualignError
    from gpualign.cli.common import progress
    from gpualign.cli.ensure import cosign_signer
    from gpualign.ensure.request import Request
    from gpualign.ledger.sources import is_registry
    from gpualign.model import driver_tag
    from gpualign.model.cosign import KEY_ENV
    from gpualign.usecases.ensure_images import NO_UPSTREAM, ensure_images

    unsigned = {t: ns for t, ns in (secure_boot or {}).items() if t in tags} if signing is None else {}
    if unsigned:
        tag, nodes = sorted(unsigned.items())[0]
        raise BadInput(f"--ensure: {tag} is for Secure Boot node(s) {', '.join(nodes)} (gpualign.io/secure-boot="
                       "enabled), whose kernel loads only signed modules: pass --sign-key/--sign-cert or "
                       "--sign-secret so it is signed")
    registries = [s for s in ledger if is_registry(s)]
    if len(registries) != 1:
        raise BadInput("--ensure needs exactly one registry ledger (--ledger registry://HOST/REPO) to put the "
                       f"missing images in; got {len(registries)}")
    specs = [driver_tag.parse(tag) for tag in tags]  # every tag's bad input before any work
    errors: list[GpualignError] = []
    request = Request(ledger=registries[0], upstream=NO_UPSTREAM, docker_config=docker_config, dry_run=dry_run,
                      signing=signing, cosign_key=cosign_signer(os.environ.get(KEY_ENV)),  # as ensure signs
                      trusted=trusted)
    made = ensure_images(request, specs, lambda t, m: progress(f"ensure {t}: {m}"),
                         lambda _, err: errors.append(err))
    if errors:  # the images made are in the ledger; the walk does not start
        raise errors[0]
    if dry_run:
        for out in made:
            stdout.print(f"  ensure: would {out.action} {out.tag}")


def _print_preflight(pre: Preflight, snap: Snapshot, pdb_aware: bool = False) -> None:
    from gpualign.upgrade.planner import image_hold

    stdout.print(f"[bold]preflight[/bold]: {len(pre.upgrades)} node(s) to upgrade, "
                 f"{len(pre.already_done)} already on target")
    for name in pre.upgrades:
        ns = snap.nodes[name]
        running = tag_of(ns.pod["spec"]["containers"][0]["image"]) if ns.pod else "no driver pod"
        problem = ns.view.image_problem
        image = "[green]image present[/]" if ns.view.image_present else \
            "[bold red]image not verified[/]" if problem is not None and problem.unverified else \
            "[bold red]image present but wrong[/]" if problem else "[bold red]image missing[/]"
        pods = pre.gpu_pods.get(name, [])
        stdout.print(f"  {name}: {running} → {ns.target_tag or '?'}  {image}  "
                     f"{len(pods)} pod(s) to evict{': ' + ', '.join(pods) if pods else ''}")
    for node, tag in pre.missing_images:
        what, _ = image_hold(tag, snap.nodes[node].view.image_problem)
        stdout.print(f"  [bold red]{node} stays upgrade-required[/]: {what} (never cordoned)")
    for node, why in sorted(pre.unmovable.items()):
        more = f" (and {len(why) - 1} more)" if len(why) > 1 else ""
        stdout.print(f"  [bold red]{node} stays upgrade-required[/]: {why[0]}{more} (never cordoned)")
    for v in pre.pdbs:
        guarded = ", ".join(f"{p} (on {n})" for p, n in v.pods)
        if not v.blocked_nodes:
            verdict = "[green]allows it[/]" + (", one pod after another" if v.one_by_one else "")
        elif pdb_aware and v.never:
            verdict = (f"[yellow]keeps {', '.join(v.blocked_nodes)} uncordoned: it can never allow a disruption; "
                       "relax it[/]")
        elif pdb_aware:
            verdict = f"[yellow]keeps {', '.join(v.blocked_nodes)} uncordoned until it allows a disruption[/]"
        else:
            verdict = f"[bold red]would block {', '.join(v.blocked_nodes)}[/]"
        stdout.print(f"  PDB {v.pdb} ({v.numbers}) protects {guarded}: {verdict}")


def _board(snap: Snapshot) -> Table:
    """The live view: one row per node, refreshed every pass."""
    from rich.table import Table

    from gpualign.upgrade import states as S
    from gpualign.upgrade.report import duration, node_status

    table = Table(box=None, pad_edge=False, header_style="bold", title="gpualign upgrade", title_justify="left")
    for col in ("NODE", "STATE", "FOR", "CORDONED", "DRIVER", "BLOCKER"):
        table.add_column(col, no_wrap=col != "BLOCKER", overflow="fold")
    style: dict[str, str] = {S.DONE: "green", S.FAILED: "bold red", S.REQUIRED: "dim"}
    for _, ns in sorted(snap.nodes.items()):
        st = node_status(ns, ledger_known=True)
        table.add_row(st.name, f"[{style.get(st.state, 'yellow')}]{st.state}[/]",
                      duration(st.in_state_seconds) if st.in_state_seconds is not None else "-", st.cordoned,
                      st.driver or "-", st.blocker or "")
    return table


def _walk_live(session: UpgradeSession, req: UpgradeRequest, ready: Prepared) -> Outcome:
    from rich.live import Live

    from gpualign.cli.common import stderr

    with Live(console=stderr.console, refresh_per_second=4, transient=False) as live:
        def report(node: str, message: str) -> None:
            live.console.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] [bold]{node}[/bold] {message}")

        return session.walk(req, ready, report, on_pass=lambda snap: live.update(_board(snap)))


UpgradePolicyOpt = Annotated[Path | None, typer.Option(
    "--upgrade-policy", metavar="FILE",
    help="the GPU Operator's DriverUpgradePolicySpec as YAML (maxParallelUpgrades, maxUnavailable, "
         "waitForCompletion, podDeletion, drain, validation, failedNodesHoldSlots)")]
OldPolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", metavar="FILE", hidden=True, help="deprecated spelling of --upgrade-policy")]
MaxParallelOpt = Annotated[int | None, typer.Option(
    "--max-parallel", metavar="N", help="maxParallelUpgrades (0: any)")]
MaxUnavailableOpt = Annotated[str | None, typer.Option(
    "--max-unavailable", metavar="N|N%", help="maxUnavailable: a count or a percentage of GPU nodes")]
EvictionTimeoutOpt = Annotated[int | None, typer.Option(
    "--eviction-timeout", metavar="SECONDS",
    help="seconds before a refused pod deletion / drain fails the node")]
FailedFreesSlotOpt = Annotated[bool, typer.Option(
    "--failed-frees-slot", help="failed nodes do not hold parallelism slots (the operator's do)")]
AdmissionOpt = Annotated[str | None, typer.Option(
    "--admission", metavar="MODE",
    help="pdb-aware (default): cordon a node only when every PodDisruptionBudget guarding its GPU pods has a "
         "disruption free that the nodes already in the walk have not spoken for (its pods then leave one "
         "after another, as kubectl drain moves them), so a saturated PDB holds its nodes uncordoned instead "
         "of stalling the walk; operator: the GPU Operator's order (by name)")]
EnsureImagesOpt = Annotated[bool, typer.Option(
    "--ensure", help="first make the missing target images exist in the (registry) ledger, as `gpualign "
                     "ensure` does: mirrored or built, and verified against their kernels, before any node is "
                     "cordoned; with --dry-run, say what it would do")]
VerifyModulesOpt = Annotated[bool | None, typer.Option(
    "--verify-modules/--no-verify-modules",
    help="check each target image's kernel modules as the node's kernel would load them (version magic, every "
         "symbol CRC against its Module.symvers) before any node is cordoned. Default: for nodes whose kernel "
         "has headers in Debian's archive (Debian 12 and 13), about 2 s an image, cached by digest; a node whose "
         "image would be refused, or cannot be checked, is held uncordoned. --verify-modules also holds nodes "
         "whose kernel cannot be checked; --no-verify-modules trusts the image's labels alone")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="evict pods no controller recreates (they are lost for good), as kubectl drain --force and "
                    "the operator's podDeletion.force/drain.force; without it a node with such a pod is held "
                    "uncordoned, naming it")]
DeleteEmptydirDataOpt = Annotated[bool, typer.Option(
    "--delete-emptydir-data", help="evict pods with emptyDir volumes (their data is lost), as kubectl drain "
                                   "--delete-emptydir-data and the operator's deleteEmptyDir")]
TimeoutOpt = Annotated[float, typer.Option(
    metavar="SECONDS", help="give up after this many seconds (0: never)")]
LockNamespaceOpt = Annotated[str, typer.Option(
    metavar="NAMESPACE", help="namespace of the Lease that keeps two walks from running at once")]


def upgrade(
    selector: SelectorOpt = None,
    to_branch: ToBranchOpt = None,
    ledger: LedgerOpt = None,
    upgrade_policy: UpgradePolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    max_parallel: MaxParallelOpt = None,
    max_unavailable: MaxUnavailableOpt = None,
    drain: Annotated[bool | None, typer.Option("--drain/--no-drain", help="drain.enable")] = None,
    eviction_timeout: EvictionTimeoutOpt = None,
    failed_frees_slot: FailedFreesSlotOpt = False,
    admission: AdmissionOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="stop after the preflight and print the plan")] = False,
    ensure_images: EnsureImagesOpt = False,
    verify_modules: VerifyModulesOpt = None,
    force: ForceOpt = False,
    delete_emptydir_data: DeleteEmptydirDataOpt = False,
    sign_key: SignKeyOpt = None,
    sign_cert: SignCertOpt = None,
    sign_secret: SignSecretOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="start without asking")] = False,
    timeout: TimeoutOpt = 0,
    lock_namespace: LockNamespaceOpt = "kube-system",
    rules: RulesOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """Walk the GPU driver upgrade node by node: image ensured → cordon → wait for jobs → evict GPU pods (or drain)
    → restart the driver pod → validate → uncordon. State lives in the GPU Operator's node labels, so a killed run
    resumes where it stopped. Nothing is cordoned before its image exists, and whatever blocks is named.

    With --ensure, the missing target images are first mirrored or built (Debian 12 here) and verified against their
    kernels, as `gpualign ensure` does, so the walk really starts at "image ensured".

    Admission is PDB-aware by default: among the nodes waiting at upgrade-required, a node is cordoned (in name
    order) only when every PodDisruptionBudget guarding its GPU pods has a disruption that the nodes already in the
    walk have not spoken for; its pods then leave one after another, as kubectl drain moves them. The others stay
    schedulable, named "waiting before cordon: PDB …", and are looked at again every pass. When only such nodes
    remain, the walk ends (exit 1) naming the PDBs to relax; with --timeout it waits for them until then. --dry-run
    prints the order it would take.

    Beside NVIDIA's GPU Operator, nodes whose driver DaemonSet it owns are refused (exit 1, before writing anything):
    with autoUpgrade on it walks them itself; with it off its upgrade controller deletes the state label from every
    node on each reconcile. Let the operator walk, gated by `gpualign controller --gate-operator-upgrades`. There is
    no override.

    Exit 0 when every node is upgrade-done, 1 when some failed or are blocked (or the operator walks them), 2 on bad
    input.

    Example:

    \b
        gpualign upgrade -l pool=train --to-branch 595 --ledger registry://reg/nvidia/driver --dry-run
    """
    from gpualign.cli.ensure import signing_key
    from gpualign.judging.judge import AUTO, OFF, STRICT
    from gpualign.loaders.rules import load_rules
    from gpualign.model.tags import normalize_branch
    from gpualign.usecases.upgrade_walk import UpgradeRequest

    if timeout < 0:
        raise BadInput(f"--timeout {timeout:g}: expected seconds >= 0 (0: never)")
    if old_policy is not None:
        warn("--policy is deprecated for upgrade: use --upgrade-policy (the same file)")
        if upgrade_policy is not None:
            raise BadInput("--policy and --upgrade-policy name the same file: pass --upgrade-policy only")
        upgrade_policy = old_policy
    branch = normalize_branch(to_branch) if to_branch else None
    pol = _policy(upgrade_policy, max_parallel, max_unavailable, drain, eviction_timeout, failed_frees_slot, admission,
                  force, delete_emptydir_data)
    if (sign_key or sign_cert or sign_secret) and not ensure_images:
        raise BadInput("--sign-key/--sign-cert/--sign-secret sign the images --ensure builds: add --ensure")
    signing = signing_key(sign_key, sign_cert, sign_secret, kubeconfig, context) if ensure_images else None
    req = UpgradeRequest(selector=selector, branch=branch, ledger=list(ledger or []), policy=pol, dry_run=dry_run,
                         ensure_images=ensure_images,
                         modules=AUTO if verify_modules is None else STRICT if verify_modules else OFF,
                         rules=load_rules(rules),
                         docker_config=docker_config, lock_namespace=lock_namespace, timeout=timeout,
                         trusted=trusted_keys(trusted_key))
    _walk(UpgradeFlags(request=req, signing=signing, yes=yes, output=output), kubeconfig, context, request_timeout)


def _walk(flags: UpgradeFlags, kubeconfig: str | None, context: str | None, request_timeout: str | None) -> None:
    """The walk asked for, in one session with the cluster: prepared (images ensured when asked), then dry-run's
    plan, or the walk itself and its summary."""
    from gpualign.cli.common import say_tty
    from gpualign.cli.fleet import parse_timeout
    from gpualign.usecases.upgrade_walk import NoLedger, UpgradeSession

    req, signing = flags.request, flags.signing

    def ensure_missing(ledger: list[str], tags: list[str], secure_boot: dict[str, list[str]]) -> None:
        _ensure_missing(ledger, tags, req.dry_run, req.docker_config, signing, secure_boot, req.trusted)

    with UpgradeSession(kubeconfig, context, parse_timeout(request_timeout), say=say_tty, warn=warn,
                        progress=progress) as session:
        try:
            ready = session.prepare(req, ensure_missing)
        except NoLedger:
            raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO; images are checked first "
                           "(no GPU Operator objects name a repository here)") from None
        if req.dry_run:
            _dry_run(session, flags, ready)
            return
        outcome = _walked(session, flags, ready)
    _summary(outcome)


@dataclass(frozen=True)
class UpgradeFlags:
    """`upgrade`'s flags, read and checked: the walk asked for (the branch normalized, the upgrade policy built),
    the signing key read, and how the command answers."""

    request: UpgradeRequest
    signing: SigningKey | None
    yes: bool
    output: Output


def _dry_run(session: UpgradeSession, flags: UpgradeFlags, ready: Prepared) -> None:
    """The preflight and the order the walk would take (exit 1 when the preflight is not clean)."""
    pol, snap, pre = flags.request.policy, ready.snap, ready.pre
    rounds, held = _admission(snap, pol)
    UPGRADE_PLAN.print(flags.output, report(
        "UpgradePlan", {"cluster": session.cluster, "ledger": list(ready.available.sources)},
        {**pre.as_dict(), "admission": {"mode": pol.admission, "order": rounds, "held": held}}), pre, snap, pol)
    if not pre.clean:
        raise typer.Exit(EXIT_FINDINGS)


def _plan_text(document: dict[str, Any], _shown: Shown, pre: Preflight, snap: Snapshot, pol: UpgradePolicy) -> None:
    """The preflight, then the order the walk would take."""
    _print_preflight(pre, snap, pol.admission == "pdb-aware")
    _print_order(document["admission"]["order"], document["admission"]["held"], pol)


UPGRADE_PLAN = Printers(command="upgrade --dry-run", table=_plan_text)


def _walked(session: UpgradeSession, flags: UpgradeFlags, ready: Prepared) -> Outcome:
    """Asked (unless --yes), then the walk, under the Lease that keeps two walks from running at once."""
    req = flags.request
    _print_preflight(ready.pre, ready.snap, req.policy.admission == "pdb-aware")
    if not flags.yes:
        if not sys.stdin.isatty():
            raise BadInput("refusing to start without --yes when not on a terminal (or use --dry-run)")
        typer.confirm("start the upgrade?", abort=True)
    if sys.stderr.isatty():
        return _walk_live(session, req, ready)
    return session.walk(req, ready, _reporter)


def _summary(outcome: Outcome) -> None:
    """Each state's count, each node held and why; exit 1 unless every node is done."""
    counts: dict[str, int] = {}
    for state in outcome.states.values():
        counts[state or "(none)"] = counts.get(state or "(none)", 0) + 1
    stdout.print(f"\n[bold]summary[/bold] after {outcome.seconds:.0f}s: "
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    for node, reason in sorted(outcome.reasons.items()):
        stdout.print(f"  {node} ({outcome.states.get(node) or '(none)'}): {reason}")
    if outcome.pdb_held:
        pdbs = sorted({a.subject for a in outcome.pdb_held.values() if a.subject})
        stdout.print(f"\n{len(outcome.pdb_held)} node(s) held before cordon ({', '.join(sorted(outcome.pdb_held))}),"
                     f" never cordoned: relax {', '.join(f'PDB {p}' for p in pdbs)} (or move its pods), then run "
                     "again; `--timeout SECONDS` waits for that instead of ending")
    if not outcome.ok:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("upgrade", short_help="Walk the driver upgrade node by node, PDB-aware and resumable: image ensured "
                                      "→ cordon → evict → restart → validate → uncordon.")(upgrade)
