"""No two walkers: gpualign's walk stays off the nodes whose driver DaemonSet NVIDIA's GPU Operator owns. Pure.

- With `spec.driver.upgradePolicy.autoUpgrade: true` the operator's upgrade controller (k8s-operator-libs) walks those
  nodes itself, writing the same state label gpualign writes: two walkers would fight over it.
- With autoUpgrade off, or no upgradePolicy, the same controller deletes `nvidia.com/gpu-driver-upgrade-state` from
  every node on each reconcile (controllers/upgrade_controller.go, removeNodeUpgradeStateLabels), and any node label
  change triggers one: a gpualign walk there would see its state wiped after every write.
So beside the operator, the operator walks and gpualign gates (`controller --gate-operator-upgrades`) and reads the
walk (`status`, `why`). `gpualign upgrade` refuses such nodes before writing anything.
"""

from __future__ import annotations

from gpualign.model.operator_config import OperatorConfig
from gpualign.upgrade.snapshot import Snapshot

OWNERS = ("ClusterPolicy", "NVIDIADriver")


def walked_by_operator(config: OperatorConfig | None, snap: Snapshot) -> list[str]:
    """Target nodes whose driver DaemonSet a ClusterPolicy or NVIDIADriver owns (autoUpgrade on or off)."""
    if config is None:
        return []
    out = []
    for name, state in sorted(snap.nodes.items()):
        owners = (state.pool.obj["metadata"].get("ownerReferences") or []) if state.pool else []
        if any(o.get("kind") in OWNERS for o in owners):
            out.append(name)
    return out


def refusal(config: OperatorConfig, nodes: list[str]) -> str:
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    if config.per_driver_upgrades:  # v26: each NVIDIADriver's own upgradePolicy decides for its nodes
        walking = [s.name for s in config.sources if config.operator_walks(s)]
        still = [s.name for s in config.sources if not config.operator_walks(s)]
        return (f"refusing to walk {shown}: their driver DaemonSets belong to the GPU Operator, which reads each "
                "NVIDIADriver's own spec.upgradePolicy: it walks the nodes of "
                + (", ".join(f"nvidiadriver/{n}" for n in walking) or "none")
                + " itself (autoUpgrade on, the default), and deletes nvidia.com/gpu-driver-upgrade-state from the "
                "nodes of " + (", ".join(f"nvidiadriver/{n}" for n in still) or "none")
                + " (autoUpgrade off). Two walkers would fight over the same node labels: let the operator walk, "
                "gated by `gpualign controller --gate-operator-upgrades`, and follow it with `gpualign status`")
    if config.auto_upgrade:
        return (f"refusing to walk {shown}: the GPU Operator walks their driver upgrade itself (ClusterPolicy "
                f"{config.cluster_policy} has spec.driver.upgradePolicy.autoUpgrade: true), and two walkers would "
                "fight over the same node labels. Let it walk: hold nodes whose image is missing with `gpualign "
                "controller --gate-operator-upgrades`, and follow it with `gpualign status` / `gpualign why NODE`")
    patch = '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":true}}}}'
    field = "has spec.driver.upgradePolicy.autoUpgrade off" if config.upgrade_policy else \
        "has no spec.driver.upgradePolicy"
    return (f"refusing to walk {shown}: their driver DaemonSets belong to the GPU Operator, and ClusterPolicy "
            f"{config.cluster_policy} {field}, so its upgrade controller deletes "
            "nvidia.com/gpu-driver-upgrade-state from every node on each reconcile: a gpualign walk would lose its "
            f"state after every step. Let the operator walk (kubectl patch clusterpolicy {config.cluster_policy} "
            f"--type merge -p '{patch}'), gated by `gpualign controller --gate-operator-upgrades`")
