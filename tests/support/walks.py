"""Hypothesis strategies for the upgrade walk's pure planner: node views and policies."""

from __future__ import annotations

from hypothesis import strategies as st

from gpualign.upgrade import states as S
from gpualign.upgrade import upgrade_policy as pol
from gpualign.upgrade.planner import NodeView


def node_views_with(pdb_demand: st.SearchStrategy[tuple[tuple[str, int], ...]]) -> st.SearchStrategy[NodeView]:
    """Any node view; pdb_demand: what its evictions would ask of which PDBs."""
    return st.builds(
        NodeView,
        name=st.text("abcdefgh", min_size=1, max_size=4),
        state=st.sampled_from([S.UNKNOWN, *S.ALL]),
        unschedulable=st.booleans(),
        ready=st.booleans(),
        skip=st.booleans(),
        initial_unschedulable=st.sampled_from([None, "true", "false"]),
        needs_upgrade=st.booleans(),
        image_present=st.booleans(),
        target_tag=st.just("595-k-ubuntu22.04"),
        pdb_demand=pdb_demand,
        unmovable=st.sampled_from([(), ("ml/gpujob has no controller: …",)]),
        maintenance=st.sampled_from([None, "NodeMaintenance default/n1-network (requestor nvidia.network.operator)"]),
        restart_only=st.booleans(),
    )


node_views = node_views_with(st.just(()))


policies = st.builds(pol.UpgradePolicy, max_parallel_upgrades=st.integers(0, 4),
                     max_unavailable=st.sampled_from(["0", "1", "2", "25%", "50%", "100%"]),
                     failed_nodes_hold_slots=st.booleans())


def unique(views: list[NodeView]) -> list[NodeView]:
    return list({v.name: v for v in views}.values())
