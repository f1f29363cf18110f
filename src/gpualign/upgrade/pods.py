"""Which pods an upgrade moves, which PDBs guard them, and how a refusal is told. Pure functions on dicts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from gpualign.base import labels as L
from gpualign.base.json_types import ReadOnlyJSON as JSON
from gpualign.model import selectors
from gpualign.model.gpu_pods import gpu_client, gpu_request
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


def is_driver_pod(pod: JSON) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(L.DRIVER_COMPONENT) == L.DRIVER_COMPONENT_VALUE


def is_daemonset_pod(pod: JSON) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_finished(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def skip_drain(pod: JSON) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(S.POD_DRAIN_SKIP) == "true"


def to_move(pods: Iterable[JSON], *, drain: bool, selector: str = "") -> list[JSON]:
    """The pods pod-deletion (GPU pods) or drain (every pod, narrowed by podSelector) must evict from a node."""
    sel = selectors.parse(selector)
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_finished(pod) or is_driver_pod(pod) or skip_drain(pod):
            continue
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        if drain:
            if is_daemonset_pod(pod) or not sel.matches(meta.get("labels") or {}):
                continue
        elif not is_gpu_pod(pod):
            continue
        out.append(pod)
    return out


def has_controller(pod: JSON) -> bool:
    return any(o.get("controller") for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


def uses_empty_dir(pod: JSON) -> bool:
    return any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or [])


def drain_refusal(pod: JSON, *, force: bool, delete_empty_dir: bool, drain: bool) -> str | None:
    """Why `kubectl drain` (and the GPU Operator's pod deletion and drain, which use its rules) would refuse to
    delete this pod, or None: a pod no controller would recreate is lost for good, so it needs --force
    (podDeletion.force / drain.force); emptyDir data is lost with the pod, so it needs --delete-emptydir-data
    (deleteEmptyDir)."""
    section = "drain" if drain else "podDeletion"
    if not force and not has_controller(pod):
        return (f"{name(pod)} has no controller: deleting it loses it for good, and kubectl drain and the GPU "
                f"Operator refuse that without --force ({section}.force)")
    if not delete_empty_dir and uses_empty_dir(pod):
        return (f"{name(pod)} uses emptyDir local storage, lost with the pod: kubectl drain and the GPU Operator "
                f"refuse that without --delete-emptydir-data ({section}.deleteEmptyDir)")
    return None


def unmovable(pods: Iterable[JSON], policy: UpgradePolicy) -> list[str]:
    """Why each pod the walk would move from a node (pod deletion, then the drain when it is on) may not be
    evicted, by kubectl drain's rules under the policy's force and deleteEmptyDir."""
    pods = list(pods)
    pd, dr = policy.pod_deletion, policy.drain
    out: list[str] = []
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


def label_selector_matches(selector: JSON | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector matches everything (a PDB's does)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
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
    meta = pod.get("metadata") or {}
    return [p for p in pdbs if (p.get("metadata") or {}).get("namespace") == meta.get("namespace")
            and label_selector_matches((p.get("spec") or {}).get("selector"), meta.get("labels") or {})]


def name(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pdb_numbers(pdb: JSON) -> str:
    st = pdb.get("status") or {}
    text = (f"{st.get('currentHealthy', '?')} healthy, {st.get('desiredHealthy', '?')} required, "
            f"{st.get('disruptionsAllowed', '?')} disruptions allowed")
    pending = st.get("disruptedPods") or {}
    if pending:  # evictions the API server counted but whose pods are not gone yet (or never will be)
        ns = (pdb.get("metadata") or {}).get("namespace")
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
