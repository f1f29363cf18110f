"""What a node the GPU Operator walks is waiting on. The operator writes the state label but no reason; gpualign
reads the reason from the cluster, so `status` and `why` describe its walk as they describe their own.

Per state: pod-deletion / drain — the pods still to go and the PDB that would refuse them (its numbers);
pod-restart — the new driver pod's state (ImagePullBackOff names the image); validation — the validator pods not
Ready; upgrade-failed (and any state) — the operator's latest warning Event (reason GPUDriverUpgrade).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpualign.base.json_types import ReadOnlyJSON as JSON
from gpualign.model.driver_pod_status import DriverPod
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S

VALIDATOR = "app=nvidia-operator-validator"


def walked_by_gpualign(annotations: Mapping[str, str]) -> bool:
    return S.STATE_SINCE in annotations or S.TARGET in annotations


def latest_warning(events: Iterable[JSON], node: str) -> str | None:
    """The newest Warning Event the operator's upgrade posted on the node."""
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == node
            and e.get("reason") == S.EVENT_REASON and e.get("type") == "Warning"]
    if not mine:
        return None
    newest = max(mine, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return str(newest.get("message") or "")


def blocker(state: str, *, pods: list[JSON], pdbs: list[JSON], driver_pod: JSON | None, target_tag: str | None,
            validators: list[JSON], events: Iterable[JSON], node: str, drain: bool) -> str | None:
    """Why a node the operator walks is still in `state`, in the words gpualign uses for its own walk."""
    event = latest_warning(events, node)
    if state == S.NODE_MAINTENANCE:
        return ("the maintenance operator cordons and drains it (a NodeMaintenance of the GPU Operator's, "
                "requestor mode); the walk goes on once it is Ready" + (f"; its last event: {event}" if event else ""))
    if state == S.POST_MAINTENANCE:
        return "maintenance done: the GPU Operator restarts its driver pod next"
    if state in (S.POD_DELETION, S.DRAIN):
        victims = P.to_move(pods, drain=state == S.DRAIN or drain)
        for pod in victims:
            guards = P.pdbs_for(pod, pdbs)
            blocked = [g for g in guards if int((g.get("status") or {}).get("disruptionsAllowed") or 0) < 1]
            if blocked:
                return (P.refusal(pod, blocked, "") + f" (the GPU Operator retries until its "
                        f"{'drain' if state == S.DRAIN else 'podDeletion'}.timeoutSeconds)"
                        + (f"; its last event: {event}" if event else ""))
        if victims:
            return f"evicting {len(victims)} pod(s): {', '.join(P.name(p) for p in victims[:3])}"
    if state == S.POD_RESTART and driver_pod is not None:
        dp = DriverPod.from_pod(dict(driver_pod))
        if not dp.ready:
            return f"new {dp.trouble()}" + (f" (target {target_tag})" if target_tag and dp.tag != target_tag else "")
    if state == S.VALIDATION:
        unready = [P.name(v) for v in validators
                   if not any(c.get("type") == "Ready" and c.get("status") == "True"
                              for c in (v.get("status") or {}).get("conditions") or [])]
        if unready:
            return f"validator pod(s) not Ready: {', '.join(unready)} (the operator fails the node after 600 s)"
        if not validators:
            return "no validator pod on the node: the GPU Operator waits forever here (k8s-operator-libs #626)"
    if state == S.FAILED:
        return f"the GPU Operator failed it: {event}" if event else "the GPU Operator failed it (no event kept)"
    return None


def derive(kube: Any, snap: Any, *, drain: bool = False) -> dict[str, str]:
    """node -> derived blocker, for nodes in the walk that carry no gpualign blocker (the operator walks them).
    Reads: events on nodes once; PDBs once; pods per such node (field selector), only for the states that need
    them."""
    todo = {n: s for n, s in snap.nodes.items() if s.view.state in S.IN_PROGRESS
            and not s.annotations.get(S.BLOCKER) and not walked_by_gpualign(s.annotations)}
    if not todo:
        return {}
    events = kube.list_raw("/api/v1/namespaces/default/events", field_selector="involvedObject.kind=Node")
    pdbs = kube.list_raw("/apis/policy/v1/poddisruptionbudgets") \
        if any(s.view.state in (S.POD_DELETION, S.DRAIN) for s in todo.values()) else []
    out: dict[str, str] = {}
    for name, state in todo.items():
        st = state.view.state
        pods = kube.pods(field_selector=f"spec.nodeName={name}") if st in (S.POD_DELETION, S.DRAIN) else []
        validators = kube.pods(label_selector=VALIDATOR, field_selector=f"spec.nodeName={name}") \
            if st == S.VALIDATION else []
        why = blocker(st, pods=pods, pdbs=pdbs, driver_pod=state.pod, target_tag=state.target_tag,
                      validators=validators, events=events, node=name, drain=drain)
        if why:
            out[name] = why
    return out
