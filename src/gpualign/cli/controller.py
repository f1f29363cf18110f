"""`gpualign controller`: watch the fleet continuously and raise the alarm the cluster never rings."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpualign.base.errors import BadInput
from gpualign.cli.options import (
    BranchOpt,
    BranchPolicyOpt,
    ContextOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    LedgerOpt,
    OldPolicyOpt,
    OperatorVersionOpt,
    RepositoryOpt,
    RulesOpt,
    TrustedKeyOpt,
    trusted_keys,
)

if TYPE_CHECKING:
    from gpualign.controller.build_trigger.preflight import BuildWillFail
    from gpualign.controller.build_trigger.trigger import BuildOptions
    from gpualign.model.operator_config import OperatorConfig


LedgerRefreshOpt = Annotated[float, typer.Option(
    metavar="SECONDS", help="seconds between re-reads of the ledger")]
GateOperatorUpgradesOpt = Annotated[bool, typer.Option(
    "--gate-operator-upgrades",
    help="beside the GPU Operator's own upgrade walk: put its skip label (nvidia.com/gpu-driver-upgrade.skip="
         "true) on any node whose target driver image is missing from the ledger, so the operator never cordons "
         "it for an image it cannot pull; remove it (only labels the gate set) once the image is there")]
GateWarnAfterOpt = Annotated[float, typer.Option(
    metavar="SECONDS", help="a node the gate has held longer than this gets a warning Event "
                            "(DriverUpgradeGatedLong, once per hold); gpualign_gate_held_seconds shows every "
                            "hold's age")]
RestartWaitingDriverPodsOpt = Annotated[bool, typer.Option(
    "--restart-waiting-driver-pods",
    help="when the ledger has the image a node's driver pod waits to pull (ImagePullBackOff, ErrImagePull), "
         "delete that pod so its DaemonSet makes it again and it pulls at once, instead of after the kubelet's "
         "back-off (up to 5 minutes); only a pod that never started, once each (needs get and delete on pods "
         "in the driver's namespace)")]
BuildOpt = Annotated[bool, typer.Option(
    "--build", help="make the images GPU nodes wait for, with nobody typing: one Kubernetes Job per missing tag "
                    "gpualign can make (mirror or build, as check's ACTION says), running `gpualign ensure TAG` "
                    "in --build-image and pushing to the ledger's registry")]
BuildImageOpt = Annotated[str | None, typer.Option(
    envvar="GPUALIGN_IMAGE", metavar="IMAGE",
    help="the image build Jobs run: gpualign's own, with its build tools [default: $GPUALIGN_IMAGE]")]
BuildNamespaceOpt = Annotated[str | None, typer.Option(
    metavar="NAMESPACE", help="namespace of the build Jobs [default: the Lease's]")]
MaxConcurrentBuildsOpt = Annotated[int, typer.Option(
    metavar="N", help="build Jobs running at once; the rest queue, oldest wait first")]
BuildRetryAfterOpt = Annotated[float, typer.Option(
    metavar="SECONDS", help="wait before retrying a build that failed for a passing reason; doubled at each "
                            "failure, up to 30 minutes")]
ArchiveAheadOpt = Annotated[bool, typer.Option(
    "--build-ahead-from-archive/--no-build-ahead-from-archive",
    help="with --build, read Debian's archive on a schedule and build, for each Debian pool, the image of the "
         "kernel the archive will install next, before any node installs it (a node waiting now goes first); "
         "$GPUALIGN_DEBIAN_MIRROR and $GPUALIGN_DEBIAN_KEYRING for a mirror of your own; needs gpgv and "
         "Debian's keyring where the controller runs (the chart's image has both), and a writable "
         "$GPUALIGN_CACHE")]
ArchiveEveryOpt = Annotated[float, typer.Option(
    "--archive-poll-seconds", metavar="SECONDS",
    help="how often Debian's archive is read (each suite's InRelease asked whether it changed)")]
BuildReplaceWrongOpt = Annotated[bool, typer.Option(
    "--build-replace-wrong",
    help="with --build, also make again an image that is in the ledger but fails the check (present but wrong: "
         "its labels or modules name another kernel or branch), with ensure --replace-wrong; off by default, "
         "since someone pushed it")]
BuildPodSettingsOpt = Annotated[Path | None, typer.Option(
    metavar="FILE", help="YAML for the build pods: nodeSelector, tolerations, resources, serviceAccountName, "
                         "pushSecret (a Secret with .dockerconfigjson), signSecret (NAMESPACE/NAME), upstream, "
                         "hostNetwork, ttlSecondsAfterFinished, activeDeadlineSeconds")]
ListenOpt = Annotated[str, typer.Option(
    metavar="HOST:PORT", help="address for /metrics, /healthz and the fleet board")]
LeaderElectOpt = Annotated[bool, typer.Option("--leader-elect/--no-leader-elect",
                                           help="hold a Lease so only one replica writes")]
LeaseNamespaceOpt = Annotated[str, typer.Option(
    envvar="POD_NAMESPACE", metavar="NAMESPACE", help="namespace of the Lease")]
IdentityOpt = Annotated[str | None, typer.Option(
    envvar="POD_NAME", metavar="NAME", help="this replica's name [default: the host name]")]


@dataclass(frozen=True, kw_only=True)
class ControllerFlags:
    """`gpualign controller`'s flags, as given."""

    ledger: LedgerOpt
    driver_branch: BranchOpt
    branch_policy_file: BranchPolicyOpt
    old_policy: OldPolicyOpt
    rules: RulesOpt
    operator_version: OperatorVersionOpt
    repository: RepositoryOpt
    docker_config: DockerConfigOpt
    insecure_registry: InsecureRegistryOpt
    trusted_key: TrustedKeyOpt
    ledger_refresh: LedgerRefreshOpt
    gate_operator_upgrades: GateOperatorUpgradesOpt
    gate_warn_after: GateWarnAfterOpt
    restart_waiting_driver_pods: RestartWaitingDriverPodsOpt
    build: BuildOpt
    build_image: BuildImageOpt
    build_namespace: BuildNamespaceOpt
    max_concurrent_builds: MaxConcurrentBuildsOpt
    build_retry_after: BuildRetryAfterOpt
    archive_ahead: ArchiveAheadOpt
    archive_every: ArchiveEveryOpt
    build_replace_wrong: BuildReplaceWrongOpt
    build_pod_settings: BuildPodSettingsOpt
    listen: ListenOpt
    leader_elect: LeaderElectOpt
    lease_namespace: LeaseNamespaceOpt
    lease_name: str
    identity: IdentityOpt
    lease_duration: float
    renew_deadline: float
    retry_period: float
    kubeconfig: KubeconfigOpt
    context: ContextOpt


def controller(
    ledger: LedgerOpt = None,
    driver_branch: BranchOpt = None,
    branch_policy_file: BranchPolicyOpt = None,
    old_policy: OldPolicyOpt = None,
    rules: RulesOpt = None,
    operator_version: OperatorVersionOpt = None,
    repository: RepositoryOpt = None,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
    ledger_refresh: LedgerRefreshOpt = 60.0,
    gate_operator_upgrades: GateOperatorUpgradesOpt = False,
    gate_warn_after: GateWarnAfterOpt = 86400,
    restart_waiting_driver_pods: RestartWaitingDriverPodsOpt = False,
    build: BuildOpt = False,
    build_image: BuildImageOpt = None,
    build_namespace: BuildNamespaceOpt = None,
    max_concurrent_builds: MaxConcurrentBuildsOpt = 1,
    build_retry_after: BuildRetryAfterOpt = 30.0,
    archive_ahead: ArchiveAheadOpt = True,
    archive_every: ArchiveEveryOpt = 900.0,
    build_replace_wrong: BuildReplaceWrongOpt = False,
    build_pod_settings: BuildPodSettingsOpt = None,
    listen: ListenOpt = "0.0.0.0:8080",
    leader_elect: LeaderElectOpt = True,
    lease_namespace: LeaseNamespaceOpt = "gpualign-system",
    lease_name: Annotated[str, typer.Option(metavar="NAME", help="name of the Lease")] = "gpualign-controller",
    identity: IdentityOpt = None,
    lease_duration: Annotated[float, typer.Option(metavar="SECONDS", help="lease duration")] = 15.0,
    renew_deadline: Annotated[float, typer.Option(metavar="SECONDS", help="renew deadline")] = 10.0,
    retry_period: Annotated[float, typer.Option(metavar="SECONDS", help="retry period")] = 2.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Run continuously (in-cluster from its ServiceAccount, or from a kubeconfig): re-check a node within a second
    of it appearing or of its kernel, OS or driver labels changing. When a node needs a driver image the ledger
    lacks: an Event (DriverImageMissing) on the Node, the annotations gpualign.io/driver-image(-status), and the
    metric gpualign_node_driver_image_missing; all cleared when the image appears.

    Beside NVIDIA's GPU Operator, with no branch or repository flag, each node's expectation comes from the
    operator's ClusterPolicy/NVIDIADriver objects (re-read every --ledger-refresh seconds) and the ledger defaults
    to their repositories; a node where the operator deploys an image built for another OS or kernel gets a
    DriverImageMismatch Event and the annotation status operator-mismatch.

    Example:

    \b
        gpualign controller --ledger registry://registry.local/nvidia/driver --ledger-refresh 60
    """
    run_controller(ControllerFlags(**locals()))


def run_controller(f: ControllerFlags) -> None:
    from gpualign.cli.inputs import branch_policy
    from gpualign.controller.build_trigger.preflight import BuildWillFail
    from gpualign.controller.run import Options
    from gpualign.controller.start import ArchiveUnverifiable, NoLedger, NothingToGate, Start, start
    from gpualign.kube.lease import LeaseNamespaceMissing
    from gpualign.ledger import sources
    from gpualign.loaders.rules import load_rules
    from gpualign.usecases.ledgers import repository_for

    listen = _address(f.listen)
    if f.ledger_refresh <= 0:
        raise BadInput("--ledger-refresh: expected seconds > 0")
    if f.gate_warn_after <= 0:
        raise BadInput("--gate-warn-after: expected seconds > 0")
    logging.basicConfig(level=log_level(os.environ.get("GPUALIGN_LOG_LEVEL", "INFO")),
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per request would drown the signal

    def warn(message: str) -> None:  # a long-running process: every line it writes is timestamped
        logging.getLogger("gpualign.controller").warning(message)

    repo = repository_for(f.repository, f.ledger or [], warn)
    if f.build_replace_wrong and not f.build:
        raise BadInput("--build-replace-wrong makes images again through build Jobs: add --build")
    if f.build:  # the flags alone first: a bad value is refused before anything is read
        build_options(f.build_image, f.build_namespace or f.lease_namespace, f.max_concurrent_builds,
                      f.build_pod_settings, repo, f.build_retry_after)
    branches = branch_policy(f.driver_branch, f.branch_policy_file, f.old_policy)
    rule_set = load_rules(f.rules)
    if f.ledger:
        sources.load(f.ledger, docker_config=f.docker_config)  # bad ledger input is a usage error, before starting

    def builds(operator: OperatorConfig | None) -> BuildOptions:
        made = build_options(f.build_image, f.build_namespace or f.lease_namespace, f.max_concurrent_builds,
                             f.build_pod_settings, build_target(f.repository, f.ledger or [], operator),
                             f.build_retry_after)
        made.replace_wrong = f.build_replace_wrong
        return made

    opts = Options(repository=repo, ledger_refresh=f.ledger_refresh, gate=f.gate_operator_upgrades,
                   gate_warn_after=f.gate_warn_after, restart_waiting_pods=f.restart_waiting_driver_pods,
                   listen=listen, leader_elect=f.leader_elect,
                   lease_namespace=f.lease_namespace,
                   lease_name=f.lease_name, identity=f.identity or "", lease_seconds=f.lease_duration,
                   renew_seconds=f.renew_deadline, retry_seconds=f.retry_period, trusted=trusted_keys(f.trusted_key))
    plan = Start(kubeconfig=f.kubeconfig, context=f.context, ledger=list(f.ledger or []), docker_config=f.docker_config,
                 pinned=bool(f.driver_branch or f.branch_policy_file or f.old_policy or f.repository), rules=rule_set,
                 branches=branches,
                 operator_version=f.operator_version, options=opts, builds=builds if f.build else None,
                 archive_ahead=f.archive_ahead, archive_every=f.archive_every,
                 gate=f.gate_operator_upgrades, build_warning=lambda line: warn(f"--build: {line}"))
    try:
        start(plan, warn)
    except NoLedger:
        raise BadInput("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); without one, "
                       "the controller needs the GPU Operator's ClusterPolicy to name the repository") from None
    except ArchiveUnverifiable as err:
        raise BadInput(f"--build-ahead-from-archive (on with --build): {err.why}; install it, or pass "
                       "--no-build-ahead-from-archive") from None
    except NothingToGate as err:
        raise BadInput(f"--gate-operator-upgrades: {err.message}") from None
    except LeaseNamespaceMissing as err:
        raise BadInput(f"{err.message} or pass --lease-namespace") from None
    except BuildWillFail as err:
        raise BadInput(f"--build: {_build_refusal(err)}") from None



def register(app: typer.Typer) -> None:
    app.command("controller", short_help="Watch the fleet continuously: alarm (Event, annotation, metric) when a "
                                         "node needs a driver image the ledger lacks.")(controller)




def _build_refusal(err: BuildWillFail) -> str:
    """Why every build would fail, with the flag that sets it right."""
    from gpualign.controller.build_trigger.preflight import PSA_ENFORCE, Cause

    if err.cause is Cause.NO_NAMESPACE:
        return (f"namespace {err.namespace} does not exist: create it (labelled {PSA_ENFORCE}=privileged) or pass "
                "--build-namespace")
    if err.cause is Cause.NO_ACCOUNT:
        return (f"no ServiceAccount {err.account} in {err.namespace}: the build pods run as it (the chart makes "
                "gpualign-builder; otherwise create it, or set serviceAccountName in --build-pod-settings)")
    return err.message


LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR",
              "critical": "CRITICAL"}


def log_level(text: str) -> str:
    """GPUALIGN_LOG_LEVEL as people write it: debug, info, warning (or warn), error, critical, in any case."""
    level = LOG_LEVELS.get(text.strip().lower())
    if level is None:
        raise BadInput(f"GPUALIGN_LOG_LEVEL={text!r}: expected one of debug, info, warning, error, critical")
    return level


def build_target(repository: str | None, ledgers: list[str], operator: OperatorConfig | None) -> str:
    """The repository build Jobs push to: --repository, else the registry ledger's, else (following the GPU
    Operator) the one repository its objects name. Never NVIDIA's registry, and never a file ledger's guess."""
    from gpualign.ledger.references import parse_ref
    from gpualign.ledger.sources import is_registry
    from gpualign.usecases.ledgers import NVIDIA_REPOSITORY

    target = repository.rstrip("/") if repository else next(
        (parse_ref(s).image for s in ledgers if is_registry(s)), None)
    if target is None and operator is not None:
        repos = sorted({s.repository for s in operator.sources if s.repository and not s.problem})
        if len(repos) > 1:
            raise BadInput(f"--build: the GPU Operator's objects name {len(repos)} repositories ({', '.join(repos)}): "
                           "pass --repository with the one build Jobs push to")
        target = repos[0] if repos else None
    if target is None:
        raise BadInput("--build: no registry to push to: pass a registry ledger (--ledger registry://HOST/REPO) or "
                       "--repository REPO; a file ledger names tags, not where images go")
    if target.split("/", 1)[0] == NVIDIA_REPOSITORY.split("/", 1)[0]:
        raise BadInput(f"--build: {target} is NVIDIA's registry, which you cannot push to: pass --repository (or a "
                       "registry ledger) with your own registry's repository")
    return target


def build_options(image: str | None, namespace: str, cap: int, settings_file: Path | None,
                  repository: str, retry_after: float = 30.0) -> BuildOptions:
    """--build's settings, checked before the controller starts (one line and exit 2 otherwise)."""
    from gpualign import __version__
    from gpualign.base import yamlio
    from gpualign.controller.build_trigger.job import BuildSettings
    from gpualign.controller.build_trigger.trigger import BuildOptions

    if not image:
        raise BadInput("--build: name the image build Jobs run (--build-image IMAGE or $GPUALIGN_IMAGE): gpualign's "
                       "own, with its build tools")
    if cap < 1:
        raise BadInput("--max-concurrent-builds: expected 1 or more")
    if retry_after <= 0:
        raise BadInput("--build-retry-after: expected seconds > 0")
    pod: dict[str, object] = {}
    if settings_file is not None:
        loaded = yamlio.read(settings_file)
        if not isinstance(loaded, dict):
            raise BadInput(f"--build-pod-settings {settings_file}: expected a mapping")
        known = {"nodeSelector", "tolerations", "resources", "serviceAccountName", "pushSecret", "signSecret",
                 "upstream", "hostNetwork", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "affinity",
                 "imagePullSecrets", "priorityClassName", "podLabels", "podAnnotations", "debianMirror",
                 "debianSecurityMirror", "cosignKeySecret", "trustedKeysConfigMap"}
        unknown = sorted(set(loaded) - known)
        if unknown:
            raise BadInput(f"--build-pod-settings {settings_file}: unknown key {unknown[0]!r} (known: "
                           f"{', '.join(sorted(known))})")
        pod = loaded
    settings = BuildSettings(
        image=image, ledger=f"registry://{repository}", namespace=namespace,
        service_account=str(pod.get("serviceAccountName") or "gpualign-builder"),
        node_selector={str(k): str(v) for k,
                       v in dict(pod.get("nodeSelector") or {}).items()},  # type: ignore[call-overload]
        tolerations=list(pod.get("tolerations") or []),  # type: ignore[call-overload]
        resources=dict(pod.get("resources") or {}),  # type: ignore[call-overload]
        push_secret=str(pod["pushSecret"]) if pod.get("pushSecret") else None,
        sign_secret=str(pod["signSecret"]) if pod.get("signSecret") else None,
        upstream=str(pod["upstream"]) if pod.get("upstream") else None,
        debian_mirror=str(pod["debianMirror"]) if pod.get("debianMirror") else None,
        debian_security_mirror=str(pod["debianSecurityMirror"]) if pod.get("debianSecurityMirror") else None,
        cosign_key_secret=str(pod["cosignKeySecret"]) if pod.get("cosignKeySecret") else None,
        trusted_keys_configmap=str(pod["trustedKeysConfigMap"]) if pod.get("trustedKeysConfigMap") else None,
        host_network=bool(pod.get("hostNetwork")),
        ttl_seconds=int(pod.get("ttlSecondsAfterFinished") or 86400),  # type: ignore[call-overload]
        deadline_seconds=int(pod.get("activeDeadlineSeconds") or 3600),  # type: ignore[call-overload]
        affinity=_mapping(pod.get("affinity")),
        image_pull_secrets=tuple(_secret_names(pod.get("imagePullSecrets"), settings_file)),
        priority_class=str(pod["priorityClassName"]) if pod.get("priorityClassName") else None,
        pod_labels={str(k): str(v) for k, v in dict(pod.get("podLabels") or {}).items()},  # type: ignore[call-overload]
        pod_annotations={str(k): str(v)
                         for k, v in dict(pod.get("podAnnotations") or {}).items()})  # type: ignore[call-overload]
    return BuildOptions(settings, cap=cap, recipe=f"gpualign {__version__}", backoff=retry_after,
                        max_backoff=max(retry_after, 1800.0))


def _secret_names(raw: object, where: Path | None) -> list[str]:
    """imagePullSecrets as Kubernetes writes them ([{name: …}]) or as names."""
    names = []
    for item in raw or []:  # type: ignore[attr-defined]
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name:
            raise BadInput(f"--build-pod-settings {where}: imagePullSecrets: expected a list of {{name: SECRET}}")
        names.append(name)
    return names


def _mapping(raw: object) -> dict[str, object] | None:
    return {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else None


def _address(listen: str) -> tuple[str, int]:
    """--listen's HOST:PORT (an empty host, or `[::]`-style brackets, as a URL's authority) as (host, port)."""
    from urllib.parse import urlsplit

    try:
        authority = urlsplit(f"//{listen}")
        port = authority.port
    except ValueError:
        port = None
    if port is None or authority.path or authority.username is not None:
        raise BadInput(f"--listen {listen!r}: expected HOST:PORT")
    return authority.hostname or "0.0.0.0", port
