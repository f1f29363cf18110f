"""`gpualign status` (where every GPU node is in the driver upgrade, on one cluster or several) and
`gpualign why NODE`."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS, BadInput
from gpualign.cli import complete
from gpualign.cli.common import report, stdout
from gpualign.cli.flags import FleetReportFlags, RegistryFlags
from gpualign.cli.fleet import AllContextsOpt, ContextsOpt, RequestTimeoutOpt
from gpualign.cli.options import (
    ContextOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    LedgerOpt,
    NoHeadersOpt,
    Output,
    OutputOpt,
    RulesOpt,
    SelectorOpt,
    TrustedKeyOpt,
    trusted_keys,
)
from gpualign.cli.printers import DATA, Printers, Shown
from gpualign.cli.upgrade import ToBranchOpt

if TYPE_CHECKING:
    from gpualign.model.fleet_report import ClusterRead


def _tonight_text(data: dict[str, Any]) -> str:
    pools, reboot = data.get("tonight"), data.get("reboot")
    if pools is None and reboot is None:
        return ""
    text = f"tonight: {data['tonight_error']}\n" if data.get("tonight_error") else ""
    if pools:
        text += "tonight (what Debian's archive installs next, per pool):\n" + "".join(f"  {p['line']}\n"
                                                                                      for p in pools)
    if reboot:
        held = [v for v in reboot if not v["ready"]]
        text += f"may reboot tonight: {len(reboot) - len(held)} of {len(reboot)} GPU nodes" + \
            (f"; held: {len(held)}\n" if held else "\n") + "".join(f"  {_verdict_line(v)}\n" for v in held)
    return text


def _verdict_line(v: dict[str, Any]) -> str:
    boots = f"boots {v['kernel']} next ({v['source']})" if v["kernel"] else "next kernel unknown"
    return f"{v['node']}: {boots}: held ({v['hold']}): {v['why']}"


def _operator_ledger(kubeconfig: str | None, context: str | None, timeout: float | None,
                     docker_config: Any) -> Any:
    """With no --ledger, the ledger the GPU Operator's objects name (as check takes it), or None where they name
    none (every node is then held: nothing judged its image)."""
    from gpualign.cli.common import say_tty, warn
    from gpualign.usecases.ledgers import load_ledger
    from gpualign.usecases.plan_images import from_operator
    from gpualign.usecases.refusals import PlanNoLedger, RepositoriesToChoose

    try:
        sources, _, _ = from_operator(kubeconfig, context, None, timeout, warn)
    except (PlanNoLedger, RepositoriesToChoose):
        return None
    return load_ledger(sources, docker_config, say=say_tty, warn=warn)


def _status_table(nodes: list[dict[str, Any]], no_headers: bool = False, fleet: bool = False,
                  wide: bool = False) -> str:
    """wide: also the tag its driver pod runs, the hold, and why it has no driver or how its image's build goes."""
    from gpualign.cli.table import Styled, render, use_color
    from gpualign.upgrade.blockers import BlockKind
    from gpualign.upgrade.report import duration

    rows: list[list[str | Styled]] = []
    for n in nodes:
        present = n["image_present"]
        image: str | Styled = "-" if present is None else "present" if present else Styled("missing", "red")
        blocker = n["blocker"] or ""
        if blocker and n.get("hold") == "before-cordon" and n.get("blocker_kind") != BlockKind.PDB:
            blocker = f"held before cordon: {blocker}"
        if blocker and n["blocked_seconds"] is not None:
            blocker += f" ({duration(n['blocked_seconds'])})"
        rows.append(([n["cluster"]] if fleet else []) + [
            n["name"], n["state"] or "(none)",
            duration(n["in_state_seconds"]) if n["in_state_seconds"] is not None else "-",
            n["walker"] or "-", n["cordoned_by"] or "no", n["driver"] or "-", n["target_tag"] or "-", image,
            blocker or "-"] + ([n["running_tag"] or "-", n["hold"] or "-", n["no_driver"] or "-",
                               n["building"] or "-"] if wide else []))
    cols = ["NODE", "STATE", "FOR", "WALKER", "CORDONED", "DRIVER", "TARGET", "IMAGE", "BLOCKER"] + \
        (["RUNNING", "HOLD", "NO DRIVER", "BUILD"] if wide else [])
    return render((["CLUSTER"] if fleet else []) + cols, rows, color=use_color(), no_headers=no_headers)


def _trouble(data: dict[str, Any]) -> str:
    """'  stuck: 1 (no driver: 1)  gated: 2' after the per-state counts, when there is any."""
    parts = []
    if data.get("stuck"):
        parts.append(f"stuck: {data['stuck']}" + (f" (no driver: {data['no_driver']})" if data.get("no_driver")
                                                  else ""))
    if data.get("gated"):
        parts.append(f"gated: {data['gated']}")
    if data.get("gpu_tainted"):
        parts.append(f"GPUs tainted by NVIDIA's DRA driver: {data['gpu_tainted']} node(s)")
    return ("  " + "  ".join(parts)) if parts else ""


def _counts(counts: dict[str, int]) -> str:
    return "  ".join(f"{state}: {count}" for state, count in counts.items())


FailOnStuckOpt = Annotated[bool, typer.Option(
    "--fail-on-stuck", help="exit 1 when a node is stuck: its driver pod not running (ImagePullBackOff, "
                            "CrashLoopBackOff), or cordoned by the upgrade with something blocking it")]
TonightOpt = Annotated[bool, typer.Option(
    "--tonight", help="also say, per GPU node, whether it may reboot tonight: the kernel it boots next (its "
                      "gpualign.io/kernel.next, else what Debian's archive installs next on its line, the "
                      "InRelease verified with gpgv; $GPUALIGN_DEBIAN_MIRROR for a mirror of your own) and that "
                      "kernel's image judged as plan judges it (the ledger defaults to the GPU Operator's); per "
                      "Debian pool, the image's build. Exit 1 while any node would reboot into a kernel without "
                      "a good image")]


@dataclass(frozen=True, kw_only=True)
class StatusFlags(RegistryFlags, FleetReportFlags):
    """`gpualign status`'s flags, as given."""

    selector: SelectorOpt
    ledger: LedgerOpt
    to_branch: ToBranchOpt
    watch: Annotated[bool, typer.Option("--watch", "-w", help="refresh every 2 s until interrupted")]
    fail_on_stuck: FailOnStuckOpt
    rules: RulesOpt
    tonight: TonightOpt


def status(
    selector: SelectorOpt = None,
    ledger: LedgerOpt = None,
    to_branch: ToBranchOpt = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="refresh every 2 s until interrupted")] = False,
    fail_on_stuck: FailOnStuckOpt = False,
    rules: RulesOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextsOpt = None,
    all_contexts: AllContextsOpt = False,
    request_timeout: RequestTimeoutOpt = None,
    tonight: TonightOpt = False,
) -> None:
    """One line per GPU node: upgrade state, time in it, who cordoned it, driver, target tag, image, blocker; and
    counts per state, to see at a glance where the fleet piles up. Reads the GPU Operator's own labels too.

    Several clusters (--context repeated, or --all-contexts): one table with a CLUSTER column, counts per cluster
    and in total; a cluster that cannot be read is named with its reason.

    A node whose driver pod is not running shows "no driver: …" (and, when its image is missing from the ledger,
    what to mirror or build); a node the controller's gate holds shows "gated: image … missing". The line under the
    table counts the stuck and gated nodes.

    Exit 1 if any node is upgrade-failed (with --fail-on-stuck, also when one is stuck; with --tonight, also when one
    may not reboot tonight); for several clusters, 4 when some cluster could not be read (5 with failures
    elsewhere)."""
    run_status(StatusFlags(**locals()))


def run_status(f: StatusFlags) -> None:
    from gpualign.cli import fleet
    from gpualign.cli.common import say_tty, warn
    from gpualign.controller.build_trigger.jobs_api import read_cluster
    from gpualign.usecases.ledgers import load_ledger
    from gpualign.usecases.upgrade_status import status_of

    timeout = fleet.parse_timeout(f.request_timeout)
    names = fleet.contexts(f.kubeconfig, f.context, f.all_contexts)
    from gpualign.loaders.rules import load_rules

    available = load_ledger(f.ledger, f.docker_config, say=say_tty, warn=warn) if f.ledger else None
    if f.tonight and available is None and names is None:
        available = _operator_ledger(f.kubeconfig, f.context[0] if f.context else None, timeout, f.docker_config)
    rule_set = load_rules(f.rules)  # once, not per cluster and per refresh
    trusted = trusted_keys(f.trusted_key)
    while True:
        if names is None:
            data, cluster = status_of(f.selector, available, f.to_branch, rule_set, f.kubeconfig,
                                      f.context[0] if f.context else None, timeout, read_builds=read_cluster,
                                      tonight=f.tonight, docker_config=f.docker_config,
                                      trusted=trusted)
            held = f.tonight and not all(v["ready"] for v in data.get("reboot") or [])
            code = EXIT_FINDINGS if data["counts"].get("upgrade-failed") or (f.fail_on_stuck and data["stuck"]) or \
                held else 0
            more: tuple[Any, ...] = ()
            document, printers = report("UpgradeStatus", {"cluster": cluster, "ledger": f.ledger or []}, data), STATUS
        else:
            from gpualign.model.fleet_report import merge_status

            if f.tonight:
                raise BadInput("--tonight reads one cluster: drop --all-contexts or the extra --context")

            def one(name: str) -> tuple[dict[str, Any], bool, str | None]:
                data, cluster = status_of(f.selector, available, f.to_branch, rule_set, f.kubeconfig, name, timeout,
                                          read_builds=read_cluster)
                bad = data["counts"].get("upgrade-failed") or (f.fail_on_stuck and data["stuck"])
                return data, not bad, cluster["server"]

            several = fleet.read_fleet(names, one, timeout, merge_status)
            code = several.code
            document, printers = several.document("FleetUpgradeStatus", f.kubeconfig, f.ledger or []), FLEET_STATUS
            more = (several.reads,)
        if f.watch and f.output not in DATA and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")  # clear the screen, as `watch` does
        printers.print(f.output, document, *more, no_headers=f.no_headers)
        sys.stdout.flush()
        if not f.watch:
            break
        time.sleep(2)
    if code:
        raise typer.Exit(code)



def why(
    node: Annotated[str, typer.Argument(metavar="NODE", help="node name", autocompletion=complete.gpu_nodes)],
    ledger: LedgerOpt = None,
    to_branch: ToBranchOpt = None,
    rules: RulesOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    tonight: Annotated[bool, typer.Option(
        "--tonight", help="also say whether the node may reboot tonight, and if not, why: the kernel it boots next "
                          "(its gpualign.io/kernel.next, else what Debian's archive installs next on its line) and "
                          "that kernel's image as plan judges it; the ledger defaults to the GPU Operator's")] = False,
) -> None:
    """Explain in plain words why a node is where it is in the driver upgrade (-o wide: then its row of `status -o
    wide`; -o json: the same lines, with the node's status as `status -o json` gives it). With --tonight, whether it
    may reboot tonight (exit 1 when it may not)."""
    from gpualign.cli.fleet import parse_timeout

    timeout = parse_timeout(request_timeout)
    from gpualign.cli.common import say_tty, warn
    from gpualign.usecases.ledgers import load_ledger

    available = load_ledger(ledger, docker_config, say=say_tty, warn=warn) if ledger else None
    from gpualign.controller.build_trigger.jobs_api import read_cluster
    from gpualign.loaders.rules import load_rules
    from gpualign.usecases.upgrade_status import why_of

    if tonight and available is None:
        available = _operator_ledger(kubeconfig, context, timeout, docker_config)
    found = why_of(node, available, to_branch, load_rules(rules), kubeconfig, context, timeout,
                   read_builds=read_cluster, tonight=tonight, docker_config=docker_config,
                   trusted=trusted_keys(trusted_key))
    cluster, lines, status = found.cluster, found.lines, found.status
    held = tonight and status is not None and not (status.get("reboot") or {}).get("ready")
    WHY.print(output, report("Why", {"cluster": cluster, "ledger": list(available.sources) if available else []},
                             {"node": node, "explanation": lines, "status": status}))
    if held:
        raise typer.Exit(EXIT_FINDINGS)


def _status_text(document: dict[str, Any], shown: Shown) -> None:
    """One cluster's status table, its counts, what is in trouble, its note, and tonight's verdicts."""
    sys.stdout.write(_status_table(document["nodes"], shown.no_headers, wide=shown.wide) + "\n" +
                     _counts(document["counts"]) + _trouble(document) + "\n" +
                     (document["note"] + "\n" if document.get("note") else "") + _tonight_text(document))


def _fleet_status_text(document: dict[str, Any], shown: Shown, reads: list[ClusterRead]) -> None:
    """The fleet's status table, each cluster's counts (or why it could not be read) and the total."""
    text = _status_table(document["nodes"], shown.no_headers, fleet=True, wide=shown.wide) + "\n"
    for r in reads:
        text += f"{r.name}: " + (_counts(document["counts"]["clusters"][r.name])
                                 + _trouble(document["trouble"]["clusters"][r.name]) if r.readable
                                 else f"unreadable: {r.error}") + "\n"
    text += f"total: {_counts(document['counts']['total'])}{_trouble(document['trouble']['total'])}\n"
    sys.stdout.write(text)


def _why_text(document: dict[str, Any], shown: Shown) -> None:
    """The node's explanation, line by line; -o wide adds its row of `status -o wide`, every column."""
    for line in document["explanation"]:
        stdout.print(line)
    if shown.wide and document["status"] is not None:
        sys.stdout.write("\n" + _status_table([document["status"]], wide=True))
        sys.stdout.flush()


STATUS = Printers(command="status", table=_status_text)
FLEET_STATUS = Printers(command="status", table=_fleet_status_text)
WHY = Printers(command="why", table=_why_text)


def register(app: typer.Typer) -> None:
    app.command("status", short_help="Where every GPU node is in the upgrade, for how long, and what blocks it.")(
        status)
    app.command("why", short_help="Explain in plain words why a node is where it is in the upgrade.")(why)
