"""No two walkers: whether NVIDIA's GPU Operator walks a node's driver upgrade itself. Pure.

With `spec.driver.upgradePolicy.autoUpgrade: true` on the ClusterPolicy, the operator's upgrade controller
(k8s-operator-libs) walks every node whose driver DaemonSet it owns, writing the same state labels gpualign writes.
Two walkers on one node would fight over them, so `gpualign upgrade` refuses such nodes before writing anything.
"""

from __future__ import annotations

from gpualign.operator_config import OperatorConfig
from gpualign.upgrade.snapshot import Snapshot

OWNERS = ("ClusterPolicy", "NVIDIADriver")


def walked_by_operator(config: OperatorConfig | None, snap: Snapshot) -> list[str]:
    """Target nodes whose driver DaemonSet a ClusterPolicy or NVIDIADriver owns, while autoUpgrade is on."""
    if config is None or not config.auto_upgrade:
        return []
    out = []
    for name, state in sorted(snap.nodes.items()):
        owners = (state.pool.obj["metadata"].get("ownerReferences") or []) if state.pool else []
        if any(o.get("kind") in OWNERS for o in owners):
            out.append(name)
    return out


def refusal(config: OperatorConfig, nodes: list[str]) -> str:
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    patch = '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":false}}}}'
    return (f"refusing to walk {shown}: the GPU Operator walks their driver upgrade itself (ClusterPolicy "
            f"{config.cluster_policy} has spec.driver.upgradePolicy.autoUpgrade: true), and two walkers would fight "
            f"over the same node labels. To let gpualign walk, set it false: kubectl patch clusterpolicy "
            f"{config.cluster_policy} --type merge -p '{patch}'; to let the operator walk, follow it with "
            "`gpualign status` and `gpualign why NODE`")
