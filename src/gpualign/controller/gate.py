"""The gate beside the GPU Operator's own upgrade walk (`gpualign controller --gate-operator-upgrades`). Pure.

The operator's upgrade controller never checks that the new driver image exists, nor that the node's GPU pods can
leave: it cordons a node, and only then does a PodDisruptionBudget refuse the eviction, or the new driver pod fail to
pull. The operator passes over a node carrying its own skip label (nvidia.com/gpu-driver-upgrade.skip=true) at
upgrade-required, uncordoned, on its old driver. The gate uses that label, and it fails closed:

- ARMED: every node the operator drives carries the label while no upgrade is asked of it, so a driver change the
  operator sees first still finds every node held (the gate and the operator react to the same object; a gate that
  labelled only after judging would race the operator's cordon).
- RELEASED: a node at upgrade-required whose target image is present and judged right, and whose GPU pods' evictions
  the PodDisruptionBudgets allow now (the admission rule gpualign's own walk uses), loses the label: the operator
  walks it at once.
- HELD: otherwise it keeps the label, with the reason in the annotation gpualign.io/upgrade-gated.
- LEFT: a node already in the operator's walk (cordoned or beyond) is left to it.

The gate only ever removes a label it set itself, marked by its annotations (gpualign.io/upgrade-gated or
gpualign.io/upgrade-armed). Its labels never outlive it: a controller running without it releases every label it
set (with an Event per node), `gpualign gate release` does the same without a controller, and the Helm chart runs
that on uninstall. An admin's own skip label (no mark of the gate's) is never touched.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from gpualign.base.labels import ARMED, GATED, GATED_KIND, GATED_PDB, GATED_SINCE, HELD_WARNED, RELEASED
from gpualign.upgrade import states as S

__all__ = ["ARMED", "GATED", "GATED_KIND", "GATED_PDB", "GATED_SINCE", "HELD_WARNED", "RELEASED", "Posture",
           "decide", "posture", "release"]

Patch = dict[str, dict[str, str | None]]
MARKS = (GATED, GATED_SINCE, HELD_WARNED, GATED_KIND, GATED_PDB, ARMED, RELEASED)
IMAGE = "image"  # the kind of an image hold (the others are gpualign.upgrade.blockers' kinds)


class Posture(enum.Enum):
    ARMED = "armed"  # no upgrade asked of it: the label waits for the operator's next walk
    HELD = "held"  # an upgrade is asked, and may not start now (the reason says why)
    RELEASED = "released"  # an upgrade is asked and may start: no label of the gate's
    LEFT = "left"  # in the operator's walk already: nothing to write
    FREE = "free"  # not the operator's to walk, and nothing to hold it for: nothing of the gate's stays on it


def posture(state: str, *, operator_node: bool, image: str | None, walk: str | None, released: bool) -> Posture:
    """Where the gate puts a node. state: its upgrade-state label; operator_node: a driver DaemonSet of the
    operator's runs there; image: why its target image cannot be used, or None; walk: why it may not join the walk
    now (a PDB, a pod drain would not evict), asked only of a node at upgrade-required; released: the gate let it
    into this walk already (then only its image can hold it again)."""
    if image is not None:
        return Posture.HELD
    if not operator_node:
        return Posture.FREE
    if state in (S.UNKNOWN, S.DONE):
        return Posture.ARMED
    if state != S.REQUIRED:
        return Posture.LEFT
    return Posture.HELD if walk is not None and not released else Posture.RELEASED


def ours(annotations: Mapping[str, str]) -> bool:
    return GATED in annotations or ARMED in annotations


def decide(labels: Mapping[str, str], annotations: Mapping[str, str], where: Posture,
           why: str = "", kind: str = "", pdb: str = "") -> Patch | None:
    """The metadata patch (labels, annotations) that brings the node to `where`, or None; a hold's why, kind and
    PDB are written with it. A skip label the gate did not set is someone else's: it is left, and never claimed."""
    skip = labels.get(S.SKIP_LABEL) == "true"
    mine = ours(annotations)
    if skip and not mine:
        return None
    if where is Posture.HELD:
        if skip and annotations.get(GATED) == why:
            return None
        since = annotations.get(GATED_SINCE) if skip and GATED in annotations else None
        return {"labels": {} if skip else {S.SKIP_LABEL: "true"},
                "annotations": {GATED: why, GATED_SINCE: since or _now(),
                                HELD_WARNED: annotations.get(HELD_WARNED) if since else None,
                                GATED_KIND: kind or None, GATED_PDB: pdb or None, ARMED: None, RELEASED: None}}
    if where is Posture.ARMED:
        if skip and ARMED in annotations and not set(annotations) & {GATED, RELEASED}:
            return None
        return {"labels": {} if skip else {S.SKIP_LABEL: "true"},
                "annotations": {**dict.fromkeys(MARKS), ARMED: _now()}}
    if where is Posture.FREE:
        return release(labels, annotations)
    if where is Posture.RELEASED:
        if not skip and RELEASED in annotations and not mine:
            return None
        return {"labels": {S.SKIP_LABEL: None} if skip else {},
                "annotations": {**dict.fromkeys(MARKS), RELEASED: _now()}}
    return None


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def release(labels: Mapping[str, str], annotations: Mapping[str, str]) -> Patch | None:
    """The patch that lets the gate go of a node (its skip label and every mark of its), or None when it holds
    nothing there (no mark: any skip label is someone else's)."""
    if not any(m in annotations for m in MARKS):
        return None
    return {"labels": {S.SKIP_LABEL: None} if labels.get(S.SKIP_LABEL) == "true" and ours(annotations) else {},
            "annotations": dict.fromkeys(MARKS)}
