"""`gpualign build list | logs TAG | retry TAG`: the build Jobs the controller's trigger (`gpualign controller
--build`) made, the log of a tag's attempts, and a second chance for one that failed for good."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import EXIT_FINDINGS
from gpualign.cli.common import emit_data, progress, report, stdout
from gpualign.cli.groups import Group
from gpualign.cli.options import ContextOpt, KubeconfigOpt, Output, OutputOpt
from gpualign.controller.build_trigger.job import DEFAULT_NAMESPACE as DEFAULT_BUILD_NAMESPACE

if TYPE_CHECKING:
    from gpualign.kube.client import Kube

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
    "--namespace", "-n", metavar="NAMESPACE", help="namespace of the build Jobs (the controller's "
                                                   "--build-namespace)")]


@app.command("list")
def list_builds(
    namespace: NamespaceOpt = DEFAULT_BUILD_NAMESPACE,
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """The build Jobs, one a tag: its phase, attempt, and for a failed one its kind and reason."""
    from gpualign.cli.table import render
    from gpualign.controller.build_trigger.jobs_api import read_builds
    from gpualign.kube.client import Kube

    with Kube(kubeconfig, context) as kube:
        read = read_builds(kube, namespace)  # a row a tag
        source = {"cluster": kube.describe()}
    rows = [{"tag": b.tag, "job": b.name, "phase": b.phase, "attempt": b.attempt, "failure": b.failure,
             "reason": b.reason} for b in sorted(read, key=lambda b: b.tag)]
    if output in (Output.json, Output.yaml):
        emit_data(report("BuildList", source, {"namespace": namespace, "builds": rows}), output)
        return
    if not rows:
        stdout.print(f"no build Jobs in {namespace}")
        return
    print(render(["TAG", "JOB", "PHASE", "ATTEMPT", "FAILURE", "REASON"],
                 [[b.tag, b.name, b.phase, str(b.attempt), b.failure or "-", b.reason or "-"]
                  for b in sorted(read, key=lambda b: b.tag)]))


def _attempts(kube: Kube, namespace: str, tag: str) -> list[tuple[int, dict[str, Any]]]:
    """The build Jobs of TAG in the namespace with their attempt, newest first; a one-line error when there is
    none."""
    from gpualign.base.errors import BadInput
    from gpualign.controller.build_trigger.jobs_api import attempts

    jobs = attempts(kube, namespace, tag)
    if not jobs:
        raise BadInput(f"no build Job for {tag} in {namespace}: the controller makes one when a node waits for the "
                       "image (gpualign build list shows the tags it built)")
    return jobs


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

    from gpualign.base.errors import BadInput, Refused
    from gpualign.controller.build_trigger.job import read_job
    from gpualign.controller.build_trigger.jobs_api import build_log, pods_of
    from gpualign.kube.client import Kube

    with Kube(kubeconfig, context) as kube:
        jobs = dict(_attempts(kube, namespace, tag))
        if attempt is not None and attempt not in jobs:
            raise BadInput(f"--attempt {attempt}: {tag} has no such attempt in {namespace} (kept: "
                           f"{', '.join(map(str, sorted(jobs)))})")
        job = jobs[attempt if attempt is not None else max(jobs)]
        name = job["metadata"]["name"]
        pods = pods_of(kube, namespace, name)
        read = read_job(job, pods[-1] if pods else None)
        print(f"# {namespace}/{name}: {tag}, attempt {read.attempt}, {read.phase}"
              + (f": {read.reason}" if read.reason else ""), file=sys.stderr)
        if not pods:
            raise Refused(f"Job {namespace}/{name} has no pod, so no log"
                          + (f": {read.reason}" if read.reason else " (it may still be waiting to be placed)"))
        pod = pods[-1]["metadata"]["name"]
        status = pods[-1].get("status") or {}
        if status.get("phase") == "Pending":  # its container has not run: the API answers with an empty log
            why = next((str(c.get("message") or c.get("reason") or "") for c in status.get("conditions") or []
                        if c.get("status") == "False" and (c.get("message") or c.get("reason"))), "")
            raise Refused(f"pod {namespace}/{pod} has no log yet: it is Pending" + (f" ({why})" if why else ""))
        resp = build_log(kube, namespace, pod)
        if resp.status_code == 400:  # the container has not started: the API says why
            raise Refused(f"pod {namespace}/{pod} has no log yet: {resp.text.strip()[:300]}")
    sys.stdout.write(resp.text)
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
    from gpualign.controller.build_trigger.jobs_api import ask_retry
    from gpualign.kube.client import Kube

    with Kube(kubeconfig, context, field_manager="gpualign-build-retry") as kube:
        name = _attempts(kube, namespace, tag)[0][1]["metadata"]["name"]
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ask_retry(kube, namespace, name, stamp)
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
    from gpualign.base.errors import BadInput, GpualignError
    from gpualign.base.labels import KERNEL, KERNEL_NEXT
    from gpualign.ensure.shared import repository
    from gpualign.ensure.sweep import unused
    from gpualign.kube.client import Kube
    from gpualign.ledger.registry import connect
    from gpualign.model.facts import node_facts

    if not ledger.startswith("registry://"):
        raise BadInput(f"--ledger {ledger}: expected registry://HOST[:PORT]/REPO (a file ledger holds no images)")
    kernels: set[str] = set()
    read: list[str] = []
    fleet: list[Any] = []  # every node's facts: the Debian pools whose next kernel the archive names
    for ctx in contexts or [None]:  # type: ignore[list-item]  # None: the current context
        with Kube(kubeconfig, ctx) as kube:
            for node in kube.list_raw("/api/v1/nodes"):
                fleet.append(node_facts(node))
                labels = (node.get("metadata") or {}).get("labels") or {}
                info = (node.get("status") or {}).get("nodeInfo") or {}
                kernels.update(k for k in (labels.get(KERNEL), labels.get(KERNEL_NEXT), info.get("kernelVersion"))
                               if k)
            read.append(kube.describe().get("context") or ctx or "current")
    offered = _offered(fleet) if archive else {}
    with connect(ledger) as client:
        modules_repo = repository(client.ref.repo)
        images = {t: client.digest(t) for t in client.tags(missing_ok=False)}
        modules = {t: client.digest(t, modules_repo) for t in client.tags(modules_repo)}
        found = unused(images, modules, kernels, keep_previous, offered.values())
        if not kernels and (found.images or found.modules or found.attachments):
            raise BadInput(f"no node in {', '.join(read)} runs or announces a kernel: refusing to sweep every image "
                           "(is this the cluster that pulls from the ledger?)")
        done: list[str] = []
        signed = tuple(t for kind, t in found.attachments if kind == "images")
        signed_modules = tuple(t for kind, t in found.attachments if kind == "modules")
        if yes:
            for repo, tags, table in ((client.ref.repo, found.images, images),
                                      (modules_repo, found.modules, modules),
                                      (client.ref.repo, signed, images), (modules_repo, signed_modules, modules)):
                for tag in tags:
                    digest = table[tag]
                    assert digest is not None
                    try:
                        client.delete_manifest(digest, repo)
                    except GpualignError as err:
                        err.message += f" ({len(done)} deleted before it)"
                        raise
                    done.append(f"{repo}:{tag}")
                    progress(f"deleted {client.ref.host}/{repo}:{tag} ({digest})")
    body = {"ledger": ledger, "clusters": read, "kernels": sorted(kernels), "dry_run": not yes,
            "offered": dict(sorted(offered.items())),
            "images": list(found.images), "modules": list(found.modules),
            "attachments": [f"{client.ref.repo if kind == 'images' else modules_repo}:{t}"
                            for kind, t in found.attachments],
            "kept": [{"tag": tag, "why": why} for tag, why in found.kept],
            "kept_shared_digest": list(found.shared_digest), "kept_unknown": list(found.unknown)}
    if output in (Output.json, Output.yaml):
        emit_data(report("LedgerSweep", {"ledger": ledger}, body), output)
    else:
        verb = "deleted" if yes else "would delete"
        for tag in found.images:
            print(f"{verb} {client.ref.host}/{client.ref.repo}:{tag}")
        for tag in found.modules:
            print(f"{verb} {client.ref.host}/{modules_repo}:{tag}")
        for kind, tag in found.attachments:
            print(f"{verb} {client.ref.host}/{client.ref.repo if kind == 'images' else modules_repo}:{tag} "
                  "(a signature, attestation or SBOM of an image that goes)")
        for tag, why in found.kept:
            print(f"kept {tag}: {_KEPT[why]}")
        for tag in found.shared_digest:
            print(f"kept {tag}: another kept tag names the same manifest")
        if not found.images and not found.modules and not found.attachments:
            print(f"nothing to sweep: every image's kernel runs, is announced, is offered next, is a fallback or is "
                  f"its line's newest in {', '.join(read)}")
        elif not yes:
            print("(a dry run: --yes deletes them)")
    if not yes and (found.images or found.modules or found.attachments):
        raise typer.Exit(EXIT_FINDINGS)


def _offered(fleet: list[Any]) -> dict[str, str]:
    """pool -> the kernel Debian's archive installs next on it; {} when no Debian node runs, and, said once, when
    the archive could not be read or verified (the newest of each line is still kept)."""
    from gpualign.base.errors import GpualignError
    from gpualign.cli.common import warn
    from gpualign.usecases import archive_next

    if not any(f.os_id == "debian" and f.kernel for f in fleet):
        return {}
    why = archive_next.cannot_verify()
    if why is None:
        try:
            return {p.name: p.next.release for p in archive_next.read(fleet, *archive_next.debian_archive()).pools
                    if p.next is not None}
        except GpualignError as err:
            why = err.message
    warn(f"Debian's archive not read ({why}): the kernels it installs next are kept only as their line's newest "
         "(--no-archive says so without trying)")
    return {}


_KEPT = {"offered next": "the kernel Debian's archive installs next on a pool",
         "fallback": "the kernel a node falls back to from one in use (--keep-previous)",
         "newest of its line": "the newest kernel of its line (a pool scaled to zero, or the archive's next)"}


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="build", short_help="The build Jobs the controller makes (--build): list them, show an "
                                                 "attempt's log, retry one.")
