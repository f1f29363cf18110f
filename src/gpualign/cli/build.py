"""`gpualign build list | logs TAG | retry TAG`: the build Jobs the controller's trigger (`gpualign controller
--build`) made, the log of a tag's attempts, and a second chance for one that failed for good."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS
from gpualign.cli.common import progress, report, stdout
from gpualign.cli.groups import Group
from gpualign.cli.options import ContextOpt, KubeconfigOpt, Output, OutputOpt
from gpualign.cli.printers import Printers, Shown
from gpualign.controller.build_trigger.job import DEFAULT_NAMESPACE as DEFAULT_BUILD_NAMESPACE

if TYPE_CHECKING:
    from gpualign.usecases.ledger_sweep import Sweep

app = typer.Typer(
    help="The controller's build trigger (`gpualign controller --build`) makes one Job per missing driver image it "
         "can make. A transient failure (a registry's 5xx, the archive unreachable) is retried with backoff; a "
         "permanent one (no headers for the kernel, modules that fail verification) waits until something changes: "
         "a new gpualign, or `gpualign build retry TAG`. Each attempt is a Job of its own, kept with its pod and "
         "log for the Jobs' ttlSecondsAfterFinished (a day by default; at most three attempts a tag): `gpualign "
         "build logs TAG` shows the latest, `--attempt N` an earlier one.",
    no_args_is_help=True,
    cls=Group,
)

NamespaceOpt = Annotated[str, typer.Option(
    "--namespace", "--build-namespace", "-n", metavar="NAMESPACE", help="namespace of the build Jobs (the controller's "
                                                   "--build-namespace)")]


@app.command("list")
def list_builds(
    namespace: NamespaceOpt = DEFAULT_BUILD_NAMESPACE,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """The build Jobs, one a tag: its phase, attempt, and for a failed one its kind and reason."""
    from gpualign.controller.build_trigger.operations import listed

    read, cluster = listed(kubeconfig, context, namespace)  # a row a tag
    rows = [{"tag": b.tag, "job": b.name, "phase": b.phase, "attempt": b.attempt, "failure": b.failure,
             "reason": b.reason} for b in read]
    BUILD_LIST.print(output, report("BuildList", {"cluster": cluster}, {"namespace": namespace, "builds": rows}))


@app.command("logs")
def logs(
    tag: Annotated[str, typer.Argument(metavar="TAG", help="the image tag whose build to show")],
    attempt: Annotated[int | None, typer.Option(
        "--attempt", metavar="N", min=1, help="an earlier attempt (default: the latest; `build list` counts them)")]
    = None,
    namespace: NamespaceOpt = DEFAULT_BUILD_NAMESPACE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """The log of TAG's latest build attempt (or --attempt N), as its pod wrote it: the failed attempt's log is
    still there after its retry. Which Job and attempt it is goes to stderr; the log alone to stdout."""
    import sys

    from gpualign.base.errors import BadInput
    from gpualign.controller.build_trigger.operations import NoSuchAttempt, attempt_log

    try:
        text = attempt_log(kubeconfig, context, namespace, tag, attempt, lambda line: print(line, file=sys.stderr))
    except NoSuchAttempt as err:
        raise BadInput(f"--attempt {attempt}: {err.message}") from None
    sys.stdout.write(text)
    sys.stdout.flush()


@app.command("retry")
def retry(
    tag: Annotated[str, typer.Argument(metavar="TAG", help="the image tag whose failed build to try again")],
    namespace: NamespaceOpt = DEFAULT_BUILD_NAMESPACE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Ask the controller to build TAG again, even after a permanent failure: its latest Job is stamped with the
    time asked, and the controller's next pass makes the next attempt (the failed one stays, with its log)."""
    from gpualign.controller.build_trigger.operations import ask_again

    name, stamp = ask_again(kubeconfig, context, namespace, tag)
    stdout.print(f"asked the controller to build {tag} again (Job {namespace}/{name}, {stamp})")


@app.command("gc")
def gc(
    ledger: Annotated[str, typer.Option("--ledger", metavar="registry://HOST/REPO",
                                        help="the ledger whose images (and REPO-modules artifacts) to sweep")],
    contexts: Annotated[list[str] | None, typer.Option(
        "--context", metavar="NAME", help="a cluster whose nodes' kernels to keep; repeat it for every cluster "
                                          "that pulls from this ledger (default: the current context)")] = None,
    keep_previous: Annotated[int, typer.Option(
        "--keep-previous", metavar="N", min=0,
        help="keep the N kernels before each kernel in use, in its line: the one a node falls back to when its new "
             "kernel fails to boot")] = 1,
    yes: Annotated[bool, typer.Option("--yes", help="delete them (without it: a dry run that lists what would "
                                                    "go)")] = False,
    archive: Annotated[bool, typer.Option(
        "--archive/--no-archive",
        help="read Debian's archive (InRelease verified with gpgv; $GPUALIGN_DEBIAN_MIRROR for a mirror of your "
             "own) and keep the kernel it installs next on each Debian pool; unreadable, the newest of each line "
             "is still kept")] = True,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Driver images and shared-module artifacts for kernels no node needs: not run, not announced
    (gpualign.io/kernel.next), not offered next by Debian's archive, not a fallback, not the newest of their line.

    Kernels are grouped by line (Debian's 6.1 amd64 kernels, bookworm's 6.12 cloud kernels, Ubuntu's 5.15.0 generic
    ones). Kept, besides every kernel in use: the --keep-previous kernels before each one in its line (where a node
    falls back when its new kernel fails to boot), and the newest kernel of every line (a pool scaled to zero comes
    back on it, and the kernel Debian's archive offers next is built ahead as the newest).

    A dry run unless --yes: it lists what would go. Every cluster that pulls from the ledger must be named with
    --context, or their kernels' images would be swept too; a cluster that cannot be read stops the sweep. Tags
    gpualign cannot read a kernel from are never touched, nor a manifest another kept tag names. Exit 0 when
    nothing is unused or the sweep is done, 1 on a dry run that found something to sweep."""
    from gpualign.cli.common import warn
    from gpualign.usecases.ledger_sweep import sweep

    done = sweep(ledger, list(contexts or []), kubeconfig=kubeconfig, keep_previous=keep_previous, delete=yes,
                 read_archive=archive, progress=progress, warn=warn)
    found = done.found

    body = {"ledger": ledger, "clusters": list(done.clusters), "kernels": list(done.kernels), "dry_run": not yes,
            "offered": done.offered, "images": list(found.images), "modules": list(found.modules),
            "attachments": [f"{done.repository(kind)}:{t}" for kind, t in found.attachments],
            "kept": [{"tag": tag, "why": why} for tag, why in found.kept],
            "kept_shared_digest": list(found.shared_digest), "kept_unknown": list(found.unknown)}
    SWEEP.print(output, report("LedgerSweep", {"ledger": ledger}, body), done)
    if not yes and done.anything:
        raise typer.Exit(EXIT_FINDINGS)


def _builds_table(document: dict[str, Any], _shown: Shown) -> None:
    if not document["builds"]:
        stdout.print(f"no build Jobs in {document['namespace']}")
        return
    from gpualign.cli.table import render

    print(render(["TAG", "JOB", "PHASE", "ATTEMPT", "FAILURE", "REASON"],
                 [[b["tag"], b["job"], b["phase"], str(b["attempt"]), b["failure"] or "-", b["reason"] or "-"]
                  for b in document["builds"]]))


def _swept_text(document: dict[str, Any], _shown: Shown, done: Sweep) -> None:
    """What goes (or went), what is kept and why, line by line."""
    found, host, yes = done.found, done.host, not document["dry_run"]

    verb = "deleted" if yes else "would delete"
    for tag in found.images:
        print(f"{verb} {host}/{done.images_repo}:{tag}")
    for tag in found.modules:
        print(f"{verb} {host}/{done.modules_repo}:{tag}")
    for kind, tag in found.attachments:
        print(f"{verb} {host}/{done.repository(kind)}:{tag} (a signature, attestation or SBOM of an image that goes)")
    for tag, why in found.kept:
        print(f"kept {tag}: {_KEPT[why]}")
    for tag in found.shared_digest:
        print(f"kept {tag}: another kept tag names the same manifest")
    if not done.anything:
        print(f"nothing to sweep: every image's kernel runs, is announced, is offered next, is a fallback or is "
              f"its line's newest in {', '.join(done.clusters)}")
    elif not yes:
        print("(a dry run: --yes deletes them)")


BUILD_LIST = Printers(command="build list", table=_builds_table)
SWEEP = Printers(command="build gc", table=_swept_text)


_KEPT = {"offered next": "the kernel Debian's archive installs next on a pool",
         "fallback": "the kernel a node falls back to from one in use (--keep-previous)",
         "newest of its line": "the newest kernel of its line (a pool scaled to zero, or the archive's next)"}


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="build", short_help="The build Jobs the controller makes (--build): list them, show an "
                                                 "attempt's log, retry one.")
