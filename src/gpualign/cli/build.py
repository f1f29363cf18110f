"""`gpualign build list | retry TAG`: the build Jobs the controller's trigger (`gpualign controller --build`) made,
and a second chance for one that failed for good."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from gpualign.cli.common import emit_data, report, stdout
from gpualign.cli.groups import Group
from gpualign.cli.options import ContextOpt, KubeconfigOpt, Output, OutputOpt

app = typer.Typer(
    help="The controller's build trigger (`gpualign controller --build`) makes one Job per missing driver image it "
         "can make. A transient failure (a registry's 5xx, the archive unreachable) is retried with backoff; a "
         "permanent one (no headers for the kernel, modules that fail verification) waits until something changes: "
         "a new gpualign, or `gpualign build retry TAG`.",
    no_args_is_help=True,
    cls=Group,
)

NamespaceOpt = Annotated[str, typer.Option(
    "--namespace", "-n", metavar="NAMESPACE", help="namespace of the build Jobs (the controller's "
                                                   "--build-namespace)")]


@app.command("list")
def list_builds(
    namespace: NamespaceOpt = "gpualign-system",
    output: OutputOpt = Output.table,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """The build Jobs, one a tag: its phase, attempt, and for a failed one its kind and reason."""
    from gpualign.cli.table import render
    from gpualign.controller.build_job import BUILD_LABEL, read_job
    from gpualign.kube import Kube

    kube = Kube(kubeconfig, context)
    try:
        jobs = kube.list_raw(f"/apis/batch/v1/namespaces/{namespace}/jobs", label_selector=f"{BUILD_LABEL}=true")
        pods = {((p.get("metadata") or {}).get("labels") or {}).get("job-name"): p
                for p in kube.pods(namespace, label_selector=f"{BUILD_LABEL}=true")}
        source = {"cluster": kube.describe()}
    finally:
        kube.close()
    read = [read_job(j, pods.get(j["metadata"]["name"])) for j in jobs]
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


@app.command("retry")
def retry(
    tag: Annotated[str, typer.Argument(metavar="TAG", help="the image tag whose failed build to try again")],
    namespace: NamespaceOpt = "gpualign-system",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Ask the controller to build TAG again, even after a permanent failure: its Job is stamped with the time
    asked, and the controller's next pass replaces it with a new attempt."""
    from gpualign.controller.build_job import RETRY_ANNOTATION
    from gpualign.controller.builds import job_name
    from gpualign.errors import BadInput
    from gpualign.kube import Kube

    name = job_name(tag)
    kube = Kube(kubeconfig, context, field_manager="gpualign-build-retry")
    try:
        if kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}") is None:
            raise BadInput(f"no build Job for {tag} in {namespace} ({name}): the controller makes one when a node "
                           "waits for the image")
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kube.patch(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                   {"metadata": {"annotations": {RETRY_ANNOTATION: stamp}}})
    finally:
        kube.close()
    stdout.print(f"asked the controller to build {tag} again (Job {namespace}/{name}, {stamp})")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="build", short_help="The build Jobs the controller makes (--build): list them, retry "
                                                 "one.")
