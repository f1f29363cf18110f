"""The build Job for one tag: gpualign's own image running `gpualign ensure TAG --ledger …`, so the build is exactly
the verified build the CLI does, and what a Job's object says of its build. Pure: the API calls are in
jobs_api.py.

Privileges, and why: the build runs as root in a privileged container. mmdebstrap unpacks the build root and the
compile runs in it under chroot (CAP_SYS_CHROOT, and root to own the unpacked files); buildah mounts the image's
container to assemble it (CAP_SYS_ADMIN, and no seccomp filter on mount); the modules are checked with depmod
against their kernel, never loaded. Nothing is mounted from the host: the build's caches live in an emptyDir, the
push credentials come from a Secret (a Docker config), the signing key from `--sign-secret`, read from the API.

Placement: never on a GPU node (a required node affinity on `nvidia.com/gpu.present`, unless the chart's
`builds.affinity` replaces it), and on a node of the builder image's architecture (`kubernetes.io/arch: amd64`),
whatever the architecture the Job builds for: an arm64 kernel's modules are cross-compiled there and its image's
own programs checked under qemu-user (docs/ensure.md). A builder image of another architecture is placed by the
chart's `builds.nodeSelector` naming `kubernetes.io/arch`; ensure then compiles natively for its own.

`backoffLimit: 0`: Kubernetes never retries the pod; the controller decides (decisions.py). A failed pod is kept with
its log until the Job's `ttlSecondsAfterFinished` removes it; the failure's kind is in the pod's termination message
(`GPUALIGN_TERMINATION_LOG`, the last lines of its log when the process left none).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpualign.base import labels as L
from gpualign.base.json_types import JSON
from gpualign.controller.build_trigger.decisions import BuildFailure, BuildJob, BuildPhase, job_name
from gpualign.model.flavours import Flavour
from gpualign.model.object_views import Condition, view
from gpualign.model.object_views import Job as JobView
from gpualign.model.object_views import Pod as PodView

BUILD_LABEL = "gpualign.io/build"  # "true" on every build Job: the controller lists them by it
TAG_HASH_LABEL = "gpualign.io/build-tag-hash"  # a label value cannot hold every tag: its hash, to select by
TAG_ANNOTATION = "gpualign.io/build-tag"
ATTEMPT_ANNOTATION = "gpualign.io/build-attempt"
RECIPE_ANNOTATION = "gpualign.io/build-recipe"
NODES_ANNOTATION = "gpualign.io/build-for-nodes"
RETRY_ANNOTATION = "gpualign.io/build-retry"  # `gpualign build retry TAG` stamps the time here
# Why the Job's pod cannot be created (its FailedCreate Event, kept on the Job: Events expire within the hour)
BLOCKED_ANNOTATION = "gpualign.io/build-blocked"
ARCH_ANNOTATION = "gpualign.io/build-arch"
DEFAULT_NAMESPACE = "gpualign-builds"  # the chart's build namespace (builds.namespace), apart from the controller's
# Off GPU nodes: a build is minutes of CPU, and the node waiting for the image is the last place for it.
OFF_GPU_NODES: JSON = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": L.GPU_PRESENT, "operator": "NotIn", "values": ["true"]}]}]}}}
TERMINATION_LOG = "/dev/termination-log"


@dataclass(frozen=True)
class BuildSettings:
    """What every build Job of one controller shares (the chart's `builds` values)."""

    image: str  # gpualign's own image
    ledger: str  # registry://HOST/REPO: where the images go
    namespace: str = DEFAULT_NAMESPACE
    service_account: str = "gpualign-builder"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[JSON] = ()
    resources: JSON = field(default_factory=dict)
    push_secret: str | None = None  # a Secret holding .dockerconfigjson, mounted as the Docker config
    sign_secret: str | None = None  # NAMESPACE/NAME, passed to `ensure --sign-secret`
    upstream: str | None = None  # `ensure --upstream` (default: NVIDIA's registry, for the tags NVIDIA publishes)
    debian_mirror: str | None = None  # GPUALIGN_DEBIAN_MIRROR of the build pods: an air-gapped fleet's own mirror
    debian_security_mirror: str | None = None  # GPUALIGN_DEBIAN_SECURITY_MIRROR
    cosign_key_secret: str | None = None  # a Secret whose `cosign.key` signs what the Job pushes (cosign's format)
    trusted_keys_configmap: str | None = None  # a ConfigMap whose `trusted.pub` holds the keys images must be signed by
    ttl_seconds: int = 86400  # finished Jobs (and a failed pod's log) are kept this long
    deadline_seconds: int = 3600  # a build that runs longer is stopped (and counts as transient)
    host_network: bool = False  # for clusters whose API server and registry are reachable only from the node
    affinity: JSON | None = None  # replaces the default (off GPU nodes)
    image_pull_secrets: Sequence[str] = ()  # to pull gpualign's image from a private registry
    priority_class: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


COSIGN_DIR = "/etc/gpualign/cosign"
TRUSTED_DIR = "/etc/gpualign/trusted"
BUILDER_ARCH = "amd64"  # gpualign's builder image's architecture: where its pods can run


def tag_hash(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()[:16]


def build_job(tag: str, attempt: int, nodes: Sequence[str], settings: BuildSettings, recipe: str, *,
              replace_wrong: bool = False, arch: str = L.DEFAULT_ARCH, flavour: str = "proprietary") -> JSON:
    """replace_wrong: the tag is in the ledger but fails the check; the Job makes it again and pushes it over.
    arch: the CPU architecture the image is for (recorded on the Job; its pod runs on BUILDER_ARCH unless the
    settings' node selector names another, and compiles across for `arch`). flavour: the kernel modules the
    nodes' driver pods load (gpualign.model.flavours)."""
    args = ["ensure", tag, "--ledger", settings.ledger]
    if flavour != Flavour.PROPRIETARY:
        args += ["--flavour", flavour]
    if replace_wrong:
        args.append("--replace-wrong")
    if settings.upstream:
        args += ["--upstream", settings.upstream]
    if settings.sign_secret:
        args += ["--sign-secret", settings.sign_secret]
    env: list[JSON] = [{"name": "GPUALIGN_CACHE", "value": "/cache"},
                       {"name": "GPUALIGN_TERMINATION_LOG", "value": TERMINATION_LOG}]
    if settings.debian_mirror:
        env.append({"name": "GPUALIGN_DEBIAN_MIRROR", "value": settings.debian_mirror})
    if settings.debian_security_mirror:
        env.append({"name": "GPUALIGN_DEBIAN_SECURITY_MIRROR", "value": settings.debian_security_mirror})
    mounts: list[JSON] = [{"name": "cache", "mountPath": "/cache"}]
    volumes: list[JSON] = [{"name": "cache", "emptyDir": {}}]
    if settings.push_secret:
        env.append({"name": "DOCKER_CONFIG", "value": "/etc/gpualign/docker"})
        mounts.append({"name": "push-credentials", "mountPath": "/etc/gpualign/docker", "readOnly": True})
        volumes.append({"name": "push-credentials", "secret": {
            "secretName": settings.push_secret, "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}})
    if settings.cosign_key_secret:  # sign what is pushed, as cosign signs
        env.append({"name": "GPUALIGN_COSIGN_KEY", "value": f"{COSIGN_DIR}/cosign.key"})
        mounts.append({"name": "cosign-key", "mountPath": COSIGN_DIR, "readOnly": True})
        # the Secret whole, as cosign writes it (cosign.key, and cosign.password beside an encrypted key)
        volumes.append({"name": "cosign-key", "secret": {"secretName": settings.cosign_key_secret}})
    if settings.trusted_keys_configmap:  # take no present image, shared modules or user space unsigned
        env.append({"name": "GPUALIGN_TRUSTED_KEYS", "value": f"{TRUSTED_DIR}/trusted.pub"})
        mounts.append({"name": "trusted-keys", "mountPath": TRUSTED_DIR, "readOnly": True})
        volumes.append({"name": "trusted-keys", "configMap": {
            "name": settings.trusted_keys_configmap, "items": [{"key": "trusted.pub", "path": "trusted.pub"}]}})
    container: JSON = {
        "name": "build", "image": settings.image, "args": args, "env": env, "volumeMounts": mounts,
        "securityContext": {"privileged": True, "runAsUser": 0},
        "terminationMessagePath": TERMINATION_LOG, "terminationMessagePolicy": "FallbackToLogsOnError"}
    if settings.resources:
        container["resources"] = dict(settings.resources)
    pod_spec: JSON = {"restartPolicy": "Never", "serviceAccountName": settings.service_account,
                      "containers": [container], "volumes": volumes,
                      "nodeSelector": {L.ARCH: BUILDER_ARCH, **settings.node_selector},
                      "affinity": dict(settings.affinity) if settings.affinity is not None else OFF_GPU_NODES}
    if not pod_spec["affinity"]:
        del pod_spec["affinity"]
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    if settings.priority_class:
        pod_spec["priorityClassName"] = settings.priority_class
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    labels = {"app.kubernetes.io/name": "gpualign", "app.kubernetes.io/component": "driver-build",
              BUILD_LABEL: "true", TAG_HASH_LABEL: tag_hash(tag)}
    pod_meta: JSON = {"labels": {**settings.pod_labels, **labels}}
    if settings.pod_annotations:
        pod_meta["annotations"] = dict(settings.pod_annotations)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(tag, attempt), "namespace": settings.namespace, "labels": labels,
                     "annotations": {TAG_ANNOTATION: tag, ATTEMPT_ANNOTATION: str(attempt),
                                     RECIPE_ANNOTATION: recipe, NODES_ANNOTATION: ",".join(sorted(nodes))[:2000],
                                     ARCH_ANNOTATION: arch}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": settings.ttl_seconds,
                 "activeDeadlineSeconds": settings.deadline_seconds,
                 "template": {"metadata": pod_meta, "spec": pod_spec}},
    }


def read_job(job: JSON | JobView, pod: JSON | PodView | None, cannot_create: str | None = None) -> BuildJob:
    """A build Job (and its pod, when it still has one) as the trigger reasons about it. cannot_create: the message
    of the Job's FailedCreate Event, when it has one (else the one kept in its annotation)."""
    job, pod = view(job, JobView), view(pod, PodView) if pod is not None else None
    ann, status = job.metadata.annotations, job.status
    finished_at = None
    failed = job.holds("Failed", "FailureTarget")
    if job.holds("Complete", "SuccessCriteriaMet") is not None:
        phase = BuildPhase.SUCCEEDED
        complete = job.holds("Complete")
        finished_at = status.completion_time or (complete.last_transition_time if complete else None)
    elif failed is not None:
        phase = BuildPhase.FAILED
        finished_at = failed.last_transition_time
    else:
        phase = BuildPhase.RUNNING
    failure: BuildFailure | None = None
    reason = ""
    blocked = cannot_create or ann.get(BLOCKED_ANNOTATION)
    if phase == BuildPhase.FAILED:
        failure, reason = failure_of(pod, failed)
        if blocked and pod is None:  # it never had a pod: waiting out its deadline changed nothing
            failure, reason = BuildFailure.PERMANENT, f"its pod could never be created: {blocked}"
    elif phase == BuildPhase.RUNNING and blocked and pod is None and not status.active:
        phase, reason = BuildPhase.BLOCKED, blocked
    return BuildJob(name=job.metadata.name, tag=ann.get(TAG_ANNOTATION, ""), phase=phase,
                    attempt=_int(ann.get(ATTEMPT_ANNOTATION), 1), recipe=ann.get(RECIPE_ANNOTATION, ""),
                    finished=_epoch(finished_at), started=_epoch(status.start_time), failure=failure,
                    reason=reason, retry_asked=_epoch(ann.get(RETRY_ANNOTATION)),
                    nodes=tuple(n for n in ann.get(NODES_ANNOTATION, "").split(",") if n))


def failure_of(pod: PodView | None, condition: Condition | None) -> tuple[BuildFailure, str]:
    """(transient or permanent, the reason in one line) of a failed build: the record gpualign left in the pod's
    termination message, else the last lines of its log there (transient: nothing says it would fail again), else
    the Job's own condition (a deadline passed, the pod gone: transient)."""
    import json

    for cs in pod.status.container_statuses if pod is not None else ():
        terminated = cs.state.terminated or cs.last_state.terminated
        if terminated is None:
            continue
        message = terminated.message.strip()
        try:
            record = json.loads(message.splitlines()[-1]) if message else None
        except ValueError:
            record = None
        if isinstance(record, dict) and "message" in record:
            kind = BuildFailure.TRANSIENT if record.get("retryable") else BuildFailure.PERMANENT
            return kind, f"gpualign: {record.get('word', 'error')}: {record['message']}"
        if message:
            tail = [line for line in message.splitlines() if line.strip()][-3:]
            return BuildFailure.TRANSIENT, " | ".join(tail)[-600:]
        exited = f"the build container exited {terminated.exit_code} ({terminated.reason})"
        return BuildFailure.TRANSIENT, exited
    why = ": ".join(p for p in (condition.reason, condition.message) if p) if condition is not None else ""
    return BuildFailure.TRANSIENT, why or "the build Job failed"


def describe(job: BuildJob, namespace: str, now: float) -> str:
    """A build in one line, as `status`, `why` and the board say it: "image building: Job NS/NAME, for 2m10s
    (attempt 1)", or how it failed and what happens next."""
    where = f"Job {namespace}/{job.name}"
    if job.phase == BuildPhase.BLOCKED:
        return f"image build cannot start: {where} cannot create its pod: {job.reason} (attempt {job.attempt})"
    if job.phase == BuildPhase.RUNNING:
        if job.started is None:
            return f"image building: {where} created, its pod not started yet (attempt {job.attempt})"
        return f"image building: {where}, for {_duration(now - job.started)} (attempt {job.attempt})"
    if job.phase == BuildPhase.SUCCEEDED:
        if job.unlisted:
            return (f"image built and pushed by {where}, but the ledger does not list it (attempt {job.attempt}; "
                    "retried after a backoff)")
        return f"image built by {where}"
    if job.failure == BuildFailure.PERMANENT:
        return (f"image build failed: {job.reason} ({where}, attempt {job.attempt}; not retried until something "
                f"changes: gpualign build retry {job.tag})")
    return f"image build failed: {job.reason} ({where}, attempt {job.attempt}; retried after a backoff)"


def cannot_create_hint(message: str, namespace: str) -> str:
    """The API's refusal of a build pod, with what would allow it."""
    if "PodSecurity" in message:
        return (f"{message} (the build pod is privileged: kubectl label namespace {namespace} "
                "pod-security.kubernetes.io/enforce=privileged, or give --build-namespace a namespace of its own "
                "that allows it)")
    if "serviceaccount" in message.lower():
        return (f"{message} (create the ServiceAccount in {namespace}, or set serviceAccountName in "
                "--build-pod-settings)")
    return message


def _duration(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def is_done(job: JSON | JobView) -> bool:
    return view(job, JobView).holds("Complete", "SuccessCriteriaMet") is not None


def is_failed(job: JSON | JobView) -> bool:
    return view(job, JobView).holds("Failed", "FailureTarget") is not None


def _int(text: object, default: int) -> int:
    try:
        return int(str(text))
    except ValueError:
        return default


def _epoch(stamp: object) -> float | None:
    if not stamp:
        return None
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
