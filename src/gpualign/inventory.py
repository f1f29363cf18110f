"""Where node facts come from: a `kubectl get nodes -o json|yaml` dump, or a live cluster (two LISTs)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gpualign import labels as L
from gpualign import operator_config, selectors
from gpualign.driver_pod import DriverPod
from gpualign.errors import BadInput
from gpualign.facts import NodeFacts, node_facts
from gpualign.operator_config import OperatorConfig


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeFacts, ...]
    pods: dict[str, DriverPod] | None  # None: not known (a dump has no pods)
    source: str


def _items(path: Path, data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        kind = data.get("kind")
        if kind not in (None, "List", "NodeList"):  # `kubectl get pods -o json` is a PodList whose items lack kind
            raise BadInput(f"{path}: a {kind}, not a node list (expected `kubectl get nodes -o json` output)")
        items = data["items"]
    elif isinstance(data, dict) and data.get("kind") == "Node":
        items = [data]
    elif isinstance(data, list):
        items = data
    else:
        raise BadInput(f"{path}: not a node list (expected `kubectl get nodes -o json` output)")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
            raise BadInput(f"{path}: item {i + 1} is not a Node object")
        if item.get("kind", "Node") != "Node":
            raise BadInput(f"{path}: item {i + 1} is a {item.get('kind')}, not a Node")
    return cast("list[dict[str, Any]]", items)


def load_nodes_file(path: Path) -> list[dict[str, Any]]:
    """The Node objects of a `kubectl get nodes -o json|yaml` dump; `-` reads stdin."""
    import sys

    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as err:
        raise BadInput(f"nodes file {path}: cannot read: {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text (not a kubectl node dump)") from None
    if "\x00" in text:
        raise BadInput(f"{path}: binary data, not text (not a kubectl node dump)")
    if not text.strip():
        raise BadInput(f"{path}: empty (expected `kubectl get nodes -o json` output)")
    if text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise BadInput(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    else:
        from gpualign import yamlio

        data = yamlio.parse(text, str(path))
    return _items(path, data)


def from_file(path: Path, selector: str | None) -> Inventory:
    sel = selectors.parse(selector)
    facts = [node_facts(n) for n in load_nodes_file(path)]
    return Inventory(tuple(f for f in facts if f.gpu and sel.matches(f.labels)), None, str(path))


def _gpu_selector(selector: str | None) -> str:
    base = f"{L.GPU_PRESENT}=true"
    return f"{base},{selector}" if selector else base


def from_cluster(kube: Any, selector: str | None, *, with_pods: bool = True) -> Inventory:
    """One metadata-only LIST of GPU nodes (labels are all the facts need), one LIST of driver pods."""
    selectors.parse(selector)  # a bad selector is a one-line usage error, before any request
    nodes = kube.nodes(_gpu_selector(selector), metadata_only=True)
    pods: dict[str, DriverPod] | None = None
    if with_pods:
        pods = {}
        for pod in kube.pods(label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                pods[node] = DriverPod.from_pod(pod)
    return Inventory(tuple(node_facts(n) for n in nodes), pods, kube.server)


@dataclass(frozen=True)
class OperatorView:
    """The GPU Operator's driver configuration as read from a cluster, and what its DaemonSets would deploy."""

    config: OperatorConfig | None
    planned: dict[str, tuple[str, str]]  # node -> (namespace/DaemonSet, driver image) the operator deploys next
    notes: tuple[str, ...]  # why something could not be read (RBAC, an unknown version): said on stderr and in JSON


def _read_crs(kube: Any, group_path: str, plural: str, kind: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(items, None); (None, None) when the cluster does not serve them; (None, why) when it will not let us."""
    resp = kube.request("GET", f"{group_path}/{plural}")
    if resp.status_code == 200:
        return list(resp.json().get("items") or []), None
    if resp.status_code in (401, 403):
        return None, (f"not allowed to read {kind} objects ({plural}.nvidia.com: HTTP {resp.status_code}): "
                      "expectations come from flags")
    if resp.status_code == 404:
        group = kube.request("GET", "/apis/nvidia.com")
        if group.status_code == 200:
            served = [v.get("groupVersion") for v in group.json().get("versions") or []]
            wanted = group_path.removeprefix("/apis/")
            if served and wanted not in served:
                return None, (f"the cluster serves {kind} as {', '.join(map(str, served))}, not {wanted}, which "
                              "gpualign reads: expectations come from flags")
        return None, None
    return None, f"reading {kind} objects: HTTP {resp.status_code}: expectations come from flags"


def read_operator_config(kube: Any, nodes: tuple[NodeFacts, ...]) -> tuple[OperatorConfig | None, tuple[str, ...]]:
    """The ClusterPolicy and (when it hands the driver to them) the NVIDIADrivers, read as the operator reads them.
    (None, ()) without the operator's CRDs; (None, notes) when the cluster will not let us read them."""
    cps, note = _read_crs(kube, "/apis/nvidia.com/v1", "clusterpolicies", "ClusterPolicy")
    if cps is None:
        return None, (note,) if note else ()
    node_labels = [(n.name, n.labels) for n in nodes]
    config = operator_config.read(cps, [], node_labels)
    if config is not None and config.nvidiadriver_mode:
        nds, note = _read_crs(kube, "/apis/nvidia.com/v1alpha1", "nvidiadrivers", "NVIDIADriver")
        if nds is None:
            return None, (note or "the ClusterPolicy hands the driver to NVIDIADriver objects, but the cluster "
                                  "serves none: expectations come from flags",)
        config = operator_config.read(cps, nds, node_labels)
    return config, ()


def operator_view(kube: Any, nodes: tuple[NodeFacts, ...]) -> OperatorView:
    """The operator's configuration and its driver DaemonSets. A cluster without the operator's CRDs gives an empty
    view; one that forbids reading them, a note."""
    config, notes_read = read_operator_config(kube, nodes)
    if config is None:
        return OperatorView(None, {}, notes_read)
    notes: list[str] = []
    planned: dict[str, tuple[str, str]] = {}
    resp = kube.request("GET", "/apis/apps/v1/daemonsets",
                        params={"labelSelector": f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"})
    if resp.status_code == 200:
        daemonsets = resp.json().get("items") or []
        for n in nodes:
            found = operator_config.daemonset_image(n.labels, daemonsets)
            if found:
                planned[n.name] = found
    else:
        notes.append(f"not allowed to read the operator's driver DaemonSets (HTTP {resp.status_code}): the image "
                     "it would deploy is known only where its pod runs")
    return OperatorView(config, planned, tuple(notes))
