"""`gpualign gate list | release`: the nodes the controller's gate holds, and letting go of them without a
controller."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpualign.cli.common import report, stdout
from gpualign.cli.fleet import RequestTimeoutOpt
from gpualign.cli.groups import Group
from gpualign.cli.options import ContextOpt, KubeconfigOpt, Output, OutputOpt, SelectorOpt
from gpualign.cli.printers import Printers, Shown

app = typer.Typer(
    help="The gate beside the GPU Operator (`gpualign controller --gate-operator-upgrades`) keeps the operator's "
         "skip label, nvidia.com/gpu-driver-upgrade.skip=true, on every node the operator drives: armed "
         "(gpualign.io/upgrade-armed) while no upgrade is asked of it, held (gpualign.io/upgrade-gated, with why) "
         "while its target image is missing or wrong or its GPU pods may not leave, and lifted when the operator "
         "asks and nothing holds it. A controller running without the gate releases those labels by itself; these "
         "commands do it without a controller (after the controller is removed, for one). An admin's own skip "
         "label, with no gpualign mark, is never touched.",
    no_args_is_help=True,
    cls=Group,
)


@app.command("list")
def list_held(
    selector: SelectorOpt = None,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """The GPU nodes the gate holds now, each with why (its target image is missing or wrong, a PDB allows no
    disruption, a GPU holder the operator would not move) and since when; then those it keeps armed. It reads
    only."""
    from gpualign.cli.fleet import parse_timeout
    from gpualign.controller.gate_holds import holds
    from gpualign.upgrade.clock import since

    found = holds(kubeconfig, context, selector, parse_timeout(request_timeout))
    cluster, nodes = found.cluster, found.nodes
    rows = [{"node": r.node, "state": "armed" if r.armed else "held", "why": r.held_for, "since": r.since,
             "held_seconds": round(since(r.since)) if r.since else None} for r in nodes]
    GATE_LIST.print(output, report("GateList", {"cluster": cluster}, {"nodes": rows}))


@app.command("release")
def release(
    selector: SelectorOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list the nodes it would release, change nothing")]
    = False,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """Remove the skip label the gate set from every GPU node it holds (with an Event on each), so the GPU
    Operator upgrades them again."""
    from gpualign.cli.fleet import parse_timeout
    from gpualign.controller.gate_holds import Release
    from gpualign.controller.gate_holds import release as release_held

    data = output in (Output.json, Output.yaml)

    def told(r: Release) -> None:
        if data:
            return
        if dry_run:
            stdout.print(f"would release {r.node} (held: {r.held_for})")
        elif r.released:
            stdout.print(f"released {r.node} (held: {r.held_for})")

    cluster, done = release_held(kubeconfig, context, selector, dry_run=dry_run,
                                 timeout=parse_timeout(request_timeout),
                                 told=told)
    rows = [{"node": r.node, "held": r.held_for, "released": r.released} for r in done]
    GATE_RELEASE.print(output, report("GateRelease", {"cluster": cluster}, {"dry_run": dry_run, "nodes": rows}))


def _held_table(document: dict[str, Any], _shown: Shown) -> None:
    """The nodes held, then those armed, each with since when and why."""
    from gpualign.cli.table import render
    from gpualign.upgrade.clock import since
    from gpualign.upgrade.report import duration

    if not document["nodes"]:
        stdout.print("the gate holds no node")
        return
    print(render(["NODE", "STATE", "SINCE", "WHY"],
                 [[r["node"], r["state"], duration(since(r["since"])) if r["since"] else "-", r["why"]]
                  for r in sorted(document["nodes"], key=lambda r: (r["state"] == "armed", r["node"]))]))


def _released_text(document: dict[str, Any], _shown: Shown) -> None:
    """After each node's line (said as it was released): how many were, or that the gate held none."""
    if not document["nodes"]:
        stdout.print("the gate holds no node")
    elif not document["dry_run"]:
        stdout.print(f"{sum(r['released'] for r in document['nodes'])} node(s) released to the GPU Operator's "
                     "upgrade walk")


GATE_LIST = Printers(command="gate list", table=_held_table)
GATE_RELEASE = Printers(command="gate release", table=_released_text)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="gate", short_help="List, or release, the nodes the controller's gate holds out of "
                                                "the GPU Operator's upgrade walk.")
