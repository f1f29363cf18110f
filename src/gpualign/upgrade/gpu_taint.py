"""DaemonSet pods that hold a GPU, kept off the node while its driver is replaced. Pure.

Eviction cannot move a DaemonSet pod: its controller places a new one on the node at once (a DaemonSet tolerates a
cordon), and the new pod holds the GPU again, so the old driver can never unload. `kubectl drain` skips such pods,
and so does the GPU Operator's drain (gpu-operator #2570). gpualign's walk keeps them off with a taint instead: a
NoExecute taint `gpualign.io/driver-upgrade` on the node. Kubernetes' taint manager deletes every pod that does not
tolerate it, and the DaemonSet controller places none there while it stays. The taint goes when the new driver has
been validated, and the DaemonSets bring their pods back.

The walk taints a node only when its driver's own DaemonSet tolerates the taint, since the new driver pod must run
there. A DaemonSet GPU pod that tolerates it (a toleration of every taint) would stay. Either holds the node before
cordon, named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpualign.base.json_types import ReadOnlyJSON as JSON

KEY = "gpualign.io/driver-upgrade"
EFFECT = "NoExecute"


def taint_value(target: str | None) -> str:
    """A taint's value naming the image tag a node moves to, as Kubernetes takes one (a label value: at most 63
    characters of letters, digits, `-`, `_` and `.`, beginning and ending with a letter or digit); `upgrading` when
    no tag is known. Shared by a node's taint and a DeviceTaintRule's."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", target or "")[:63]
    cleaned = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
    return cleaned or "upgrading"


def taint(target: str | None) -> dict[str, str]:
    """The walk's taint; its value names the image the node is moving to."""
    return {"key": KEY, "value": taint_value(target), "effect": EFFECT}


def tolerates(tolerations: Iterable[Mapping[str, Any]] | None, key: str = KEY, effect: str = EFFECT) -> bool:
    """Whether a pod's tolerations tolerate a taint with `key` and `effect` (any value), as the scheduler and the
    taint manager match them: an empty key with Exists tolerates every taint; an empty effect, every effect."""
    for t in tolerations or ():
        if not isinstance(t, Mapping):
            continue
        if t.get("effect") and t.get("effect") != effect:
            continue
        operator = t.get("operator") or "Equal"
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t.get("key") == key and operator == "Exists":
            return True
    return False


def pod_tolerations(pod_or_template_spec: JSON | None) -> list[Mapping[str, Any]]:
    return list((pod_or_template_spec or {}).get("tolerations") or [])


def has_taint(taints: Iterable[Mapping[str, Any]] | None) -> bool:
    return any(isinstance(t, Mapping) and t.get("key") == KEY and t.get("effect") == EFFECT for t in taints or ())


def with_taint(taints: Iterable[Mapping[str, Any]] | None, target: str | None) -> list[dict[str, Any]]:
    """The node's taints with the walk's added (once)."""
    kept = [dict(t) for t in taints or () if isinstance(t, Mapping)]
    return kept if has_taint(kept) else [*kept, taint(target)]


def without_taint(taints: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The node's taints with the walk's removed, every other kept as it was."""
    return [dict(t) for t in taints or () if isinstance(t, Mapping)
            and not (t.get("key") == KEY and t.get("effect") == EFFECT)]
