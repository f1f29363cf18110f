"""Which pods an upgrade moves, which PDBs guard them, and how a refusal is told. Pure functions: the API's objects
(dicts) in, read through their views (gpualign.model.object_views); the pods to move are handed back as given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gpualign.base import labels as L
from gpualign.base.json_types import ReadOnlyJSON as JSON
from gpualign.model import selectors
from gpualign.model.gpu_pods import gpu_client, gpu_request
from gpualign.model.object_views import LabelSelector, MovablePod, ObjectMeta, PodDisruptionBudget, view
from gpualign.upgrade import gpu_taint
from gpualign.upgrade import states as S

if TYPE_CHECKING:  # a type only: status and why never load the policy's reader
    from gpualign.upgrade.upgrade_policy import UpgradePolicy



def is_gpu_pod(pod: JSON) -> bool:
    """Requests nvidia.com/gpu* or nvidia.com/mig-*, holds a DRA claim, runs with an nvidia runtime class, or is
    placed as a third-party GPU client on nvidia.com/gpu.deploy.client=true (gpualign.model.gpu_pods). The operator
    only looks at requests and claims; runtimeClass users (and DaemonSets using the GPU that way) are then never
    moved and the upgrade stalls (gpu-operator #2570)."""
    spec = pod.get("spec") or {}
    return gpu_request(spec) is not None or gpu_client(spec)


def is_driver_pod(pod: MovablePod) -> bool:
    return pod.metadata.labels.get(L.DRIVER_COMPONENT) == L.DRIVER_COMPONENT_VALUE


def is_daemonset_pod(pod: MovablePod) -> bool:
    return any(o.kind == "DaemonSet" for o in pod.metadata.owner_references)


def is_finished(pod: MovablePod) -> bool:
    return pod.status.phase in ("Succeeded", "Failed")


def skip_drain(pod: MovablePod) -> bool:
    return pod.metadata.labels.get(S.POD_DRAIN_SKIP) == "true"


def daemonset_gpu_pods(pods: Iterable[JSON]) -> list[JSON]:
    """The DaemonSet pods on a node that hold a GPU (the driver's own aside): eviction cannot move them (their
    DaemonSet places new ones at once), so the walk keeps them off with a taint (gpualign.upgrade.gpu_taint)."""
    out = []
    for pod in pods:
        read = view(pod, MovablePod)
        if is_daemonset_pod(read) and not is_driver_pod(read) and not is_finished(read) and is_gpu_pod(pod) \
                and "kubernetes.io/config.mirror" not in read.metadata.annotations:
            out.append(pod)
    return out


def to_move(pods: Iterable[JSON], *, drain: bool, selector: str = "") -> list[JSON]:
    """The pods pod-deletion (GPU pods) or drain (every pod, narrowed by podSelector) must evict from a node. A
    DaemonSet pod is never evicted (its DaemonSet would place it again at once): see daemonset_gpu_pods."""
    sel = selectors.parse(selector)
    out = []
    for pod in pods:
        read = view(pod, MovablePod)
        meta = read.metadata
        if meta.deletion_timestamp or is_finished(read) or is_driver_pod(read) or skip_drain(read):
            continue
        if "kubernetes.io/config.mirror" in meta.annotations:
            continue
        if is_daemonset_pod(read):
            continue
        if drain:
            if not sel.matches(meta.labels):
                continue
        elif not is_gpu_pod(pod):
            continue
        out.append(pod)
    return out


def has_controller(pod: MovablePod) -> bool:
    return any(o.controller for o in pod.metadata.owner_references)


def uses_empty_dir(pod: MovablePod) -> bool:
    return any(v.empty_dir is not None for v in pod.spec.volumes)


def drain_refusal(pod: JSON, *, force: bool, delete_empty_dir: bool, drain: bool) -> str | None:
    """Why `kubectl drain` (and the GPU Operator's pod deletion and drain, which use its rules) would refuse to
    delete this pod, or None: a pod no controller would recreate is lost for good, so it needs --force
    (podDeletion.force / drain.force); emptyDir data is lost with the pod, so it needs --delete-emptydir-data
    (deleteEmptyDir)."""
    section = "drain" if drain else "podDeletion"
    read = view(pod, MovablePod)
    who = read.metadata.ref
    if not force and not has_controller(read):
        return (f"{who} has no controller: deleting it loses it for good, and kubectl drain and the GPU "
                f"Operator refuse that without --force ({section}.force)")
    if not delete_empty_dir and uses_empty_dir(read):
        return (f"{who} uses emptyDir local storage, lost with the pod: kubectl drain and the GPU Operator "
                f"refuse that without --delete-emptydir-data ({section}.deleteEmptyDir)")
    return None


def unmovable(pods: Iterable[JSON], policy: UpgradePolicy,
              driver_tolerations: list[Mapping[str, Any]] | None = None) -> list[str]:
    """Why each pod the walk would move from a node (pod deletion, then the drain when it is on) may not be
    evicted, by kubectl drain's rules under the policy's force and deleteEmptyDir; and why a DaemonSet pod holding
    a GPU cannot be kept off (driver_tolerations: the driver DaemonSet's, when known)."""
    pods = list(pods)
    pd, dr = policy.pod_deletion, policy.drain
    out: list[str] = []
    for pod in daemonset_gpu_pods(pods):
        who = view(pod, MovablePod).metadata.ref
        if gpu_taint.tolerates(gpu_taint.pod_tolerations(pod.get("spec"))):
            out.append(f"DaemonSet pod {who} holds a GPU and tolerates every taint: the walk cannot keep it off "
                       "the node while the driver is replaced")
        elif driver_tolerations is not None and not gpu_taint.tolerates(driver_tolerations):
            out.append(f"DaemonSet pod {who} holds a GPU; the walk keeps such pods off with the NoExecute taint "
                       f"{gpu_taint.KEY}, which the driver's DaemonSet does not tolerate: add "
                       f"{{key: {gpu_taint.KEY}, operator: Exists, effect: NoExecute}} to its tolerations")
    for pod in to_move(pods, drain=False):
        why = drain_refusal(pod, force=pd.force, delete_empty_dir=pd.delete_empty_dir, drain=False)
        if why and dr.enable:  # pod deletion would fail on it and fall back to the drain: the drain's rules decide
            why = drain_refusal(pod, force=dr.force, delete_empty_dir=dr.delete_empty_dir, drain=True)
        if why:
            out.append(why)
    if dr.enable:
        for pod in to_move(pods, drain=True, selector=dr.pod_selector):
            why = drain_refusal(pod, force=dr.force, delete_empty_dir=dr.delete_empty_dir, drain=True)
            if why and why not in out:
                out.append(why)
    return out


def label_selector_matches(selector: JSON | LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector matches everything (a PDB's does)."""
    if not selector:
        return True
    selector = view(selector, LabelSelector)
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in selector.match_expressions:
        key, op, values = expr.key, expr.operator, expr.values
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pdbs_for(pod: JSON, pdbs: Iterable[JSON]) -> list[JSON]:
    meta = view(pod.get("metadata") or {}, ObjectMeta)
    return [p for p, budget in ((p, view(p, PodDisruptionBudget)) for p in pdbs)
            if budget.metadata.namespace == meta.namespace
            and label_selector_matches(budget.spec.selector, meta.labels)]


def name(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pdb_numbers(pdb: JSON) -> str:
    budget = view(pdb, PodDisruptionBudget)
    st = budget.status

    def known(number: int | None) -> str:
        return "?" if number is None else str(number)

    text = (f"{known(st.current_healthy)} healthy, {known(st.desired_healthy)} required, "
            f"{known(st.disruptions_allowed)} disruptions allowed")
    pending = st.disrupted_pods
    if pending:  # evictions the API server counted but whose pods are not gone yet (or never will be)
        ns = budget.metadata.namespace
        first = sorted(pending.items(), key=lambda kv: str(kv[1]))[0]
        more = f" and {len(pending) - 1} more" if len(pending) > 1 else ""
        text += (f"; it still counts {ns}/{first[0]}{more} as disrupted since {first[1]} (an eviction whose pod "
                 f"was not deleted, e.g. a client killed mid-request, is forgotten after 2 minutes)")
    return text


def refusal(pod: JSON, pdbs: Iterable[JSON], api_message: str) -> str:
    """'eviction of ns/trainer-0 refused by PDB ns/trainer-pdb: 2 healthy, 2 required, 0 disruptions allowed'."""
    guards = pdbs_for(pod, pdbs)
    if guards:
        return "; ".join(f"eviction of {name(pod)} refused by PDB {name(p)}: {pdb_numbers(p)}" for p in guards)
    return f"eviction of {name(pod)} refused: {api_message or 'HTTP 429'}"
