"""The gate's holds on a cluster, read and released: what `gpualign gate list` and `gate release` do. The nodes are
read as the controller's gate marks them (controller/gate_release.py), and each release is told as it is made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpualign.controller.gate_release import Released, held, release_node
from gpualign.kube.client import Kube

RELEASED_BY = "released by `gpualign gate release`"


@dataclass(frozen=True)
class Holds:
    cluster: dict[str, str | None]  # the cluster as its kubeconfig names it (Kube.describe)
    nodes: list[Released]


@dataclass(frozen=True)
class Release:
    node: str
    held_for: str
    released: bool  # False under dry_run, or when the node was no longer held when read again


def holds(kubeconfig: str | None, context: str | None, selector: str | None, timeout: float | None = None) -> Holds:
    """The GPU nodes the gate holds now, and why (it reads only)."""
    with Kube(kubeconfig, context, timeout=timeout) as kube:
        return Holds(kube.describe(), held(kube, selector))


def release(kubeconfig: str | None, context: str | None, selector: str | None, *, dry_run: bool,
            timeout: float | None = None,
            told: Callable[[Release], None] = lambda _r: None) -> tuple[dict[str, str | None], list[Release]]:
    """Release every node the gate holds (each read fresh and patched with its resourceVersion, with an Event), or
    with dry_run only list them; each is told as it is done. The cluster's name and every node's release."""
    with Kube(kubeconfig, context, timeout=timeout, field_manager="gpualign-gate-release") as kube:
        out = []
        for r in held(kube, selector):
            done = Release(r.node, r.held_for, not dry_run and release_node(kube, r.node, RELEASED_BY))
            told(done)
            out.append(done)
        return kube.describe(), out
