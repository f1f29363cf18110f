"""Whether a node the GPU Operator is about to walk may join its walk now: the gate's admission beside the operator
(`controller --gate-operator-upgrades`). Pure.

The rule is the one gpualign's own walk admits nodes with (gpualign.upgrade.planner, one definition): every
PodDisruptionBudget guarding the node's GPU pods has a disruption free that nodes already in the walk have not spoken
for, and no pod there is one `kubectl drain` would refuse to evict under the operator's podDeletion and drain
settings. The operator keeps its own pace (maxParallelUpgrades, maxUnavailable): the gate adds no slot of its own.

Beside the operator one more thing holds a node: a GPU holder the operator's walk never moves. Its pod deletion
evicts only pods asking for nvidia.com/gpu* (or a DRA claim), its drain skips every DaemonSet pod, and its driver
manager pauses only its own operands and the pods placed on nvidia.com/gpu.deploy.client; a pod on the NVIDIA runtime
class without a request (gpu-operator #2570), or a DaemonSet pod holding a GPU, would still hold the GPU when the
driver is replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.base.json_types import ReadOnlyJSON as JSON
from gpualign.model import selectors
from gpualign.model.gpu_pods import gpu_client, gpu_request
from gpualign.model.object_views import MovablePod, view
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import BlockKind
from gpualign.upgrade.budget import Budget, demands
from gpualign.upgrade.planner import Action, NodeView, next_actions
from gpualign.upgrade.upgrade_policy import PDB_AWARE, UpgradePolicy, from_dict

LEFT_HOLDING = "held before cordon: the GPU Operator's walk would leave a GPU holder on the node"


@dataclass(frozen=True)
class Walking:
    """A node in the operator's walk with its evictions still ahead (or let in by the gate and not yet cordoned)."""

    name: str
    unschedulable: bool = False


def node_of(pod: JSON) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def left_holding(pods: Iterable[JSON], policy: UpgradePolicy, operator_namespace: str | None) -> list[str]:
    """The pods on a node that hold a GPU and that the operator's walk would not move, each with why. The
    operator's own operands (its namespace) and pods placed on gpu.deploy.client are paused by its driver manager."""
    pods = list(pods)

    def paused(pod: JSON) -> bool:
        return view(pod, MovablePod).metadata.namespace == operator_namespace or gpu_client(pod.get("spec") or {})

    out = [f"DaemonSet pod {view(pod, MovablePod).metadata.ref} holds a GPU "
           f"({_how(gpu_request(pod.get('spec') or {}) or 'runtime')}), and the operator never evicts DaemonSet pods: "
           "stop it (or move its DaemonSet off the node) before the driver is replaced"
           for pod in P.daemonset_gpu_pods(pods) if not paused(pod)]
    for pod in P.to_move(pods, drain=False):  # the GPU pods a walk would evict; the operator's deletion asks more
        how = gpu_request(pod.get("spec") or {})
        labels = view(pod, MovablePod).metadata.labels
        if how in (None, "resources") or paused(pod) or (
                policy.drain.enable and selectors.parse(policy.drain.pod_selector).matches(labels)):
            continue
        out.append(f"pod {view(pod, MovablePod).metadata.ref} holds a GPU {_how(how)} without asking for "
                   "nvidia.com/gpu, so the operator's pod deletion leaves it (it moves only pods that ask; "
                   "gpu-operator #2570) and its drain "
                   + ("does not select it" if policy.drain.enable else "is off (drain.enable: false)"))
    return out


def _how(how: str) -> str:
    return {"resources": "as it asks for nvidia.com/gpu", "runtime": "through the NVIDIA runtime class",
            "claims": "through a DRA claim"}.get(how, how)


def walk_hold(name: str, *, unschedulable: bool, walking: Iterable[Walking], pods: Iterable[JSON],
              pdbs: Iterable[JSON], policy: UpgradePolicy, operator_namespace: str | None = None) -> Action | None:
    """Why the node may not join the operator's walk now (an Action of kind "hold": its sentence, kind and PDB), or
    None when it may. pods: the pods on this node and on the walking ones; pdbs: every PodDisruptionBudget."""
    pods, pdbs = list(pods), list(pdbs)
    mine = [p for p in pods if node_of(p) == name]
    left = left_holding(mine, policy, operator_namespace)
    if left:
        more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
        return Action(name, "hold", f"{LEFT_HOLDING}: {left[0]}{more}", BlockKind.UNMOVABLE)
    need = demands(pdbs, pods)
    budgets = {b.name: b for b in map(Budget.from_pdb, pdbs)}

    def demand(node: str) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(need.get(node, {}).items()))

    views = [NodeView(w.name, S.CORDON, w.unschedulable, pdb_demand=demand(w.name)) for w in walking
             if w.name != name]
    views.append(NodeView(name, S.REQUIRED, unschedulable, pdb_demand=demand(name),
                          unmovable=tuple(P.unmovable(mine, policy))))
    open_pace = replace(policy, max_parallel_upgrades=0, max_unavailable="100%", admission=PDB_AWARE)
    for action in next_actions(views, open_pace, budgets):
        if action.node == name:
            return action if action.kind == "hold" else None
    return None


def operator_policy(raw: Mapping[str, Any]) -> UpgradePolicy:
    """The operator's podDeletion, drain and waitForCompletion settings, as gpualign's walk reads the same fields.
    One it cannot read counts as the defaults (no force, no emptyDir deletion, no drain): the stricter reading, so
    the gate holds rather than lets a node in on a guess."""
    try:
        return from_dict({k: raw[k] for k in ("podDeletion", "drain", "waitForCompletion") if k in raw},
                         "the GPU Operator's upgradePolicy")
    except BadInput:
        return UpgradePolicy()
