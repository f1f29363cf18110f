"""Before the build trigger starts (`gpualign controller --build`): what would make every build Job fail, refused
in one line at start-up rather than found later as a privileged pod that can only fail.

- the build namespace exists, and its Pod Security level admits a privileged pod;
- the builder ServiceAccount exists there.

The controller reads these by name. It never reads the push Secret: the credential is mounted in the build pods
alone, and a missing one is the build pod's own failure to start (its Event), not something the controller may look
at.
"""

from __future__ import annotations

from enum import StrEnum

from gpualign.base.errors import BadInput, GpualignError
from gpualign.base.json_types import JSON
from gpualign.controller.build_trigger.job import BuildSettings
from gpualign.kube.client import Kube

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def pod_security_problem(labels: dict[str, str], namespace: str) -> str | None:
    """Why the namespace's Pod Security admission refuses the privileged build pod, or None."""
    level = labels.get(PSA_ENFORCE)
    if level in (None, "privileged"):
        return None
    return (f"namespace {namespace} enforces Pod Security {level!r} ({PSA_ENFORCE}={level}), which refuses the "
            f"privileged build pod: label it {PSA_ENFORCE}=privileged (kubectl label namespace {namespace} "
            f"{PSA_ENFORCE}=privileged), or give "
            "--build-namespace a namespace of its own")


class Cause(StrEnum):
    NO_NAMESPACE = "no-namespace"
    POD_SECURITY = "pod-security"
    NO_ACCOUNT = "no-account"


class BuildWillFail(BadInput):
    """Every build Job would fail: the build namespace is missing, refuses a privileged pod (`message` says how),
    or lacks the builder ServiceAccount."""

    def __init__(self, cause: Cause, namespace: str, message: str, account: str = "") -> None:
        super().__init__(message)
        self.cause, self.namespace, self.account = cause, namespace, account


def check(kube: Kube, settings: BuildSettings) -> list[str]:
    """Refuse (BuildWillFail) what makes every build fail; return warnings for what only might."""
    ns = settings.namespace
    warnings: list[str] = []
    try:
        namespace = kube.get(f"/api/v1/namespaces/{ns}")
    except GpualignError as err:
        warnings.append(f"namespace {ns} could not be read ({err.message}): its Pod Security level is not known; "
                        "a pod it refuses is reported as the build's FailedCreate")
        namespace = {}
    if namespace is None:
        raise BuildWillFail(Cause.NO_NAMESPACE, ns, f"namespace {ns} does not exist: create it (labelled "
                            f"{PSA_ENFORCE}=privileged)")
    problem = pod_security_problem(((namespace.get("metadata") or {}).get("labels") or {}), ns)
    if problem:
        raise BuildWillFail(Cause.POD_SECURITY, ns, problem)
    def read(path: str, what: str) -> JSON | None | bool:
        try:
            return kube.get(path)
        except GpualignError as err:  # no right to read it: say so, and let the build's own failure tell
            warnings.append(f"{what} could not be checked ({err.message})")
            return False

    account = read(f"/api/v1/namespaces/{ns}/serviceaccounts/{settings.service_account}",
                   f"ServiceAccount {ns}/{settings.service_account}")
    if account is None:
        raise BuildWillFail(Cause.NO_ACCOUNT, ns, f"no ServiceAccount {settings.service_account} in {ns}: the build "
                            "pods run as it (the chart makes gpualign-builder; otherwise create it)",
                            settings.service_account)
    return warnings
