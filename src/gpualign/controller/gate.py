"""The gate beside the GPU Operator's own upgrade walk (`gpualign controller --gate-operator-upgrades`). Pure.

The operator's upgrade controller never checks that the new driver image exists: it cordons and drains a node, and
only then does the new driver pod fail to pull. The gate puts the operator's own skip label
(nvidia.com/gpu-driver-upgrade.skip=true) on a node whose target image is missing from the ledger, so the operator
leaves it at upgrade-required, uncordoned, with its old driver; and takes the label off once the image is there.
It only ever removes a label it set itself, marked by the annotation gpualign.io/upgrade-gated.

The gate's labels never outlive the gate: a controller running without it releases every label it set (with an
Event per node), `gpualign gate release` does the same without a controller, and the Helm chart runs that on
uninstall. An admin's own skip label (no gpualign.io/upgrade-gated mark) is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpualign.base.labels import GATED, GATED_SINCE, HELD_WARNED
from gpualign.upgrade import states as S

__all__ = ["GATED", "GATED_SINCE", "HELD_WARNED", "decide", "release"]


def decide(labels: Mapping[str, str], annotations: Mapping[str, str], *, image_missing: bool,
           target: str | None, why: str = "") -> dict[str, dict[str, str | None]] | None:
    """The metadata patch (labels, annotations) that brings the node in line with the gate, or None.
    image_missing: the target image cannot be used (missing from the ledger, or present but wrong: `why`)."""
    skip = labels.get(S.SKIP_LABEL) == "true"
    ours = GATED in annotations
    if image_missing:
        if skip:  # held already: by the gate, or by someone else's label, which it leaves and does not claim
            return None
        return {"labels": {S.SKIP_LABEL: "true"},
                "annotations": {GATED: f"target image {target or '?'} {why or 'missing from the ledger'}",
                                GATED_SINCE: _now(), HELD_WARNED: None}}
    if ours:
        return {"labels": {S.SKIP_LABEL: None} if skip else {},
                "annotations": {GATED: None, GATED_SINCE: None, HELD_WARNED: None}}
    return None


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def release(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, dict[str, str | None]] | None:
    """The patch that lets the gate go of a node it holds (its skip label and its mark), or None when it holds
    nothing there (no mark: any skip label is someone else's)."""
    if GATED not in annotations:
        return None
    return {"labels": {S.SKIP_LABEL: None} if labels.get(S.SKIP_LABEL) == "true" else {},
            "annotations": {GATED: None, GATED_SINCE: None, HELD_WARNED: None}}
