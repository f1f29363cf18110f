"""What the lab's commands do to a running lab, over its own cluster and registry clients: seed a scenario (NVIDIA's
GPU Operator included, when the scenario runs it), add a node, push a tiny image. The command line parses, checks its
flags and says what was done; refusals here are typed, and worded there with the flags."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.kube.client import Kube
from gpualign.lab import cluster, operator, seed, versions
from gpualign.lab.scenarios import DriverPool, NodeSpec, Scenario
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.model.image_ref import tag_of

Progress = Callable[[str], None]


class BranchConflict(BadInput):
    """A pool's driver DaemonSet deploys another branch to every node of it: `deployed` is that branch."""

    def __init__(self, pool: str, deployed: str) -> None:
        super().__init__(f"pool {pool}'s driver DaemonSet deploys branch {deployed}")
        self.pool, self.deployed = pool, deployed


def seed_scenario(state: cluster.LabState, bin_dir: Path, chosen: Scenario, progress: Progress) -> None:
    """The scenario's fleet (and, for an operator scenario, the operator's CRDs and CRs and the operator itself,
    waited for until it has deployed everywhere). A failure stops every process the lab started: nothing half-up."""
    try:
        with Kube(str(state.kubeconfig)) as kube:
            if chosen.operator:
                _up_operator(kube, state, bin_dir, chosen, progress)
            else:
                seed.seed(kube, chosen, state.registry, progress=progress)
    except BaseException:
        cluster.down(state.dir)
        raise


def _up_operator(kube: Kube, state: cluster.LabState, bin_dir: Path, chosen: Scenario, progress: Progress) -> None:
    operator.operator_files(bin_dir)  # fail before seeding when the operator is not built
    seed.seed_operator_fleet(kube, chosen, state.registry, progress=progress)
    operator.install(kube, bin_dir, chosen, state.registry, progress=progress)
    progress(f"starting NVIDIA's GPU Operator ({versions.GPU_OPERATOR}) out of cluster")
    state.procs["gpu-operator"] = operator.start(state.dir, bin_dir, state.kubeconfig)
    state.save()
    started = time.monotonic()
    outcome = operator.wait_deployed(kube, chosen, progress=progress)
    failed = sorted(n for n, o in outcome.items() if o != "ready")
    state.extra["operator_deploy_seconds"] = round(time.monotonic() - started, 2)
    progress(f"the operator deployed drivers in {time.monotonic() - started:.1f}s"
             + (f"; image pull failed on {', '.join(failed)}" if failed else ""))


def cluster_pools(state: cluster.LabState) -> list[DriverPool]:
    """The NVIDIADrivers on the lab's cluster now (the scenario's, and any made since), as DriverPools."""
    with Kube(str(state.kubeconfig)) as kube:
        found = kube.list_raw("/apis/nvidia.com/v1alpha1/nvidiadrivers")
    return [DriverPool(d["metadata"]["name"], dict((d.get("spec") or {}).get("nodeSelector") or {}),
                       str((d.get("spec") or {}).get("version") or "").split(".", 1)[0]) for d in found]


def add_node(state: cluster.LabState, spec: NodeSpec, *, branch: str, same_branch_as: str | None,
             driver_pool: bool, wait: bool) -> None:
    """Add the node (and, with driver_pool, the driver DaemonSet of its kernel and OS pool). same_branch_as: a
    branch the pool's DaemonSet, when it exists already, must deploy (BranchConflict otherwise)."""
    with Kube(str(state.kubeconfig)) as kube:
        if same_branch_as:
            _same_branch(kube, seed.driver_daemonset(spec.kernel, spec.os_id, spec.os_version, same_branch_as,
                                                     state.registry), same_branch_as)
        seed.add_node(kube, spec, branch=branch, registry=state.registry, driver_pool=driver_pool)
        if wait:
            seed.wait_nodes_ready(kube, [spec.name])


def _same_branch(kube: Kube, daemonset: dict[str, Any], branch: str) -> None:
    """A branch for a pool whose driver DaemonSet exists already must be the branch that DaemonSet deploys
    (changing it would move every node of the pool)."""
    meta = daemonset["metadata"]
    found = kube.get(f"/apis/apps/v1/namespaces/{meta['namespace']}/daemonsets/{meta['name']}")
    if found is None:
        return
    image = found["spec"]["template"]["spec"]["containers"][0]["image"]
    deployed = tag_of(image).split("-", 1)[0]
    if deployed != branch:
        raise BranchConflict(meta["name"], deployed)


def push_image(registry: str, repo: str, tag: str, env: dict[str, str], archs: tuple[str, ...],
               labels: dict[str, str] | None) -> None:
    """A tiny image (one per architecture, under an index when several) pushed to the lab registry."""
    with RegistryClient(RegistryRef(host=registry, repo=repo, scheme="http")) as client:
        client.push_image(tag, env, archs=archs, labels=labels)
