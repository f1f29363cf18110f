"""Where node facts come from: a `kubectl get nodes -o json|yaml` dump, or a live cluster (two LISTs)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gpualign.base import labels as L
from gpualign.base.collector import held_off
from gpualign.base.errors import BadInput
from gpualign.kube import dra_reads
from gpualign.kube.dra_reads import DraDevices
from gpualign.model import operator_config, selectors
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.facts import NodeFacts, from_labels, node_facts, with_dra_driver
from gpualign.model.operator_config import OperatorConfig


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeFacts, ...]
    pods: dict[str, DriverPod] | None  # None: not known (a dump has no pods)
    source: str
    dra: DraDevices | None = None  # NVIDIA's DRA devices (None: not read, as from a dump)


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


_JSON_START = re.compile(rb"[ \t\r\n]*[\[{]")


def _fast_json(raw: bytes) -> Any:
    """A JSON dump parsed by orjson straight from its bytes: several times faster than json, with no text copy of
    the file. None when it does not start as JSON or orjson refuses it (NaN, a BOM, invalid text): the careful path
    then reads it as before, and words every error as json does."""
    if b"\x00" in raw or not _JSON_START.match(raw):
        return None
    import orjson

    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def load_nodes_file(path: Path) -> list[dict[str, Any]]:
    """The Node objects of a `kubectl get nodes -o json|yaml` dump; `-` reads stdin."""
    import sys

    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as err:
        raise BadInput(f"nodes file {path}: cannot read: {err.strerror}") from None
    fast = _fast_json(raw)
    if fast is not None:  # an object or a list: what the careful path would have parsed
        return _items(path, fast)
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
        from gpualign.base import yamlio

        data = yamlio.parse(text, str(path))
    return _items(path, data)


def from_file(path: Path, selector: str | None) -> Inventory:
    sel = selectors.parse(selector)
    with held_off():
        facts = [node_facts(n) for n in load_nodes_file(path)]
    return Inventory(tuple(f for f in facts if f.gpu and sel.matches(f.labels)), None, str(path))


def driver_pods(kube: Any) -> dict[str, DriverPod]:
    """The GPU Operator's driver pods that are not going away, by node name."""
    pods: dict[str, DriverPod] = {}
    for page in kube.list_pages("/api/v1/pods", label_selector=f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}",
                                decode=_driver_pods):
        pods.update(page)
    return pods


def _driver_pods(body: bytes) -> list[tuple[str, DriverPod]]:
    """A pod LIST page's body → (node, driver pod) for each pod bound to a node and not going away: decoded by
    gpualign.kube.pod_meta (only the fields a DriverPod reads are built); a page of another shape is read as dicts."""
    import msgspec  # a cluster's read only, as the decoders below
    import orjson

    from gpualign.kube.pod_meta import driver_pods as decoded

    try:
        return decoded(body)
    except msgspec.ValidationError:
        pass
    pods = []
    for pod in orjson.loads(body).get("items") or []:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            pods.append((str(node), DriverPod.from_pod(pod)))
    return pods


def _metadata_facts(body: bytes) -> list[NodeFacts]:
    """A metadata-only LIST page's body → its nodes' facts, decoded by gpualign.kube.node_meta; a page of another shape
    (a label that is not a string, a null name) is read as dicts, as node_facts reads any node."""
    import msgspec  # a cluster's read only, as the decoder below
    import orjson

    from gpualign.kube.node_meta import decoder

    try:
        items = decoder.decode(body).items
    except msgspec.ValidationError:
        return [node_facts(n) for n in orjson.loads(body).get("items") or []]
    return [from_labels(i.metadata.name or "<unnamed>", i.metadata.labels, i.metadata.annotations) for i in items]


def gpu_node_facts(kube: Any, selector: str | None,
                   each_page: Callable[[list[NodeFacts]], None] | None = None,
                   others: dict[str, NodeFacts] | None = None) -> tuple[NodeFacts, ...]:
    """One metadata-only LIST of the nodes (labels are all the facts need), read into facts page by page: no page
    is kept once read, and no field the facts do not read is built, so the LIST is never in memory twice. A GPU
    node is found by its labels (gpualign.model.facts.GPU_LABELS: no label selector can ask for one label or
    another, so the nodes are filtered here). each_page: handed each page's GPU nodes as it is read (a caller
    deciding nodes while the rest are on the wire). others: given the other nodes' facts, by name (a node whose
    driver pod says it is a GPU node after all)."""
    # a cluster's read only: the client module (and its HTTP stack) stays away from a dump's check
    from gpualign.kube.client import DECIDED_PAGE_BYTES, PAGE_BYTES

    facts: list[NodeFacts] = []
    with held_off():
        for page in kube.list_pages("/api/v1/nodes", label_selector=selector or None, metadata_only=True,
                                    decode=_metadata_facts,
                                    page_bytes=PAGE_BYTES if each_page is None else DECIDED_PAGE_BYTES):
            gpus = [f for f in page if f.gpu]
            if others is not None and len(gpus) < len(page):
                others.update((f.name, f) for f in page if not f.gpu)
            facts.extend(gpus)
            if each_page is not None:
                each_page(gpus)
    return tuple(facts)


def with_driver_pods(others: dict[str, NodeFacts], pods: dict[str, DriverPod]) -> tuple[NodeFacts, ...]:
    """The nodes that carry no GPU label but run a GPU Operator driver pod: GPU nodes all the same (the operator's
    DRA mode labels none; a node whose NFD labels went away)."""
    return tuple(dataclasses.replace(others[name], gpu=True) for name in sorted(pods) if name in others)


def from_cluster(kube: Any, selector: str | None, *, with_pods: bool = True,
                 each_page: Callable[[list[NodeFacts]], None] | None = None,
                 pods_read: Callable[[dict[str, DriverPod]], None] | None = None) -> Inventory:
    """The GPU nodes' facts and, with_pods, the driver pods: the two LISTs side by side. each_page: as
    gpu_node_facts (the nodes found by their driver pods come last, as a page of their own); pods_read: handed the
    driver pods as soon as they are read."""
    selectors.parse(selector)  # a bad selector is a one-line usage error, before any request
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2, thread_name_prefix="gpualign-pods") as pool:
        slices = pool.submit(dra_reads.read, kube)  # a node without GFD labels has its driver there
        pods = pool.submit(driver_pods, kube) if with_pods else None
        if pods is not None and pods_read is not None:
            tell = pods_read
            pods.add_done_callback(lambda done: done.exception() is None and tell(done.result()))

        def known(page: list[NodeFacts]) -> list[NodeFacts]:
            if all(f.driver is not None for f in page):
                return page
            return [with_dra_driver(f, slices.result().drivers) for f in page]

        told = None if each_page is None else (lambda page: each_page(known(page)))
        others: dict[str, NodeFacts] = {}
        nodes = known(list(gpu_node_facts(kube, selector, told, others)))
        found = known(list(with_driver_pods(others, pods.result()))) if pods is not None else []
        if found and each_page is not None:
            each_page(found)
        return Inventory(tuple(nodes) + tuple(found), pods.result() if pods is not None else None, kube.server,
                         slices.result())


@dataclass(frozen=True)
class OperatorView:
    """The GPU Operator's driver configuration as read from a cluster, and what its DaemonSets would deploy."""

    config: OperatorConfig | None
    planned: dict[str, tuple[str, str]]  # node -> (namespace/DaemonSet, driver image) the operator deploys next
    notes: tuple[str, ...]  # why something could not be read (RBAC, an unknown version): said on stderr and in JSON
    daemonsets_read: bool = False  # planned is complete: a node missing from it has no driver DaemonSet


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


@dataclass(frozen=True)
class OperatorObjects:
    """The GPU Operator's objects as read, before they are matched to nodes: its ClusterPolicies and NVIDIADrivers
    (None when there is no configuration to follow, notes saying why when the cluster would not let us read it),
    and its driver DaemonSets (None when they could not be read, ds_note saying why)."""

    cluster_policies: list[dict[str, Any]] | None
    nvidia_drivers: list[dict[str, Any]]
    notes: tuple[str, ...]
    daemonsets: list[dict[str, Any]] | None = None
    ds_note: str | None = None


def read_operator_objects(kube: Any, *, daemonsets: bool = False) -> OperatorObjects:
    """Everything read_operator_config and operator_view_of need, with no node needed: so it can be read while the
    nodes are."""
    cps, note = _read_crs(kube, "/apis/nvidia.com/v1", "clusterpolicies", "ClusterPolicy")
    if cps is None:
        return OperatorObjects(None, [], (note,) if note else ())
    nds: list[dict[str, Any]] = []
    probe = operator_config.read(cps, [])
    if probe is not None and probe.nvidiadriver_mode:
        found, note = _read_crs(kube, "/apis/nvidia.com/v1alpha1", "nvidiadrivers", "NVIDIADriver")
        if found is None:
            return OperatorObjects(None, [], (note or "the ClusterPolicy hands the driver to NVIDIADriver objects, "
                                                      "but the cluster serves none: expectations come from flags",))
        nds = found
    if not daemonsets or probe is None:
        return OperatorObjects(cps, nds, ())
    resp = kube.request("GET", "/apis/apps/v1/daemonsets",
                        params={"labelSelector": f"{L.DRIVER_COMPONENT}={L.DRIVER_COMPONENT_VALUE}"})
    if resp.status_code == 200:
        return OperatorObjects(cps, nds, (), list(resp.json().get("items") or []))
    return OperatorObjects(cps, nds, (), None,
                           f"not allowed to read the operator's driver DaemonSets (HTTP {resp.status_code}): the "
                           "image it would deploy is known only where its pod runs")


def operator_config_of(objects: OperatorObjects, nodes: tuple[NodeFacts, ...]) \
        -> tuple[OperatorConfig | None, tuple[str, ...]]:
    if objects.cluster_policies is None:
        return None, objects.notes
    return operator_config.read(objects.cluster_policies, objects.nvidia_drivers,
                                [(n.name, n.labels) for n in nodes]), ()


def read_operator_config(kube: Any, nodes: tuple[NodeFacts, ...]) -> tuple[OperatorConfig | None, tuple[str, ...]]:
    """The ClusterPolicy and (when it hands the driver to them) the NVIDIADrivers, read as the operator reads them.
    (None, ()) without the operator's CRDs; (None, notes) when the cluster will not let us read them."""
    return operator_config_of(read_operator_objects(kube), nodes)


def operator_view_of(objects: OperatorObjects, nodes: tuple[NodeFacts, ...]) -> OperatorView:
    """The operator's configuration and what its driver DaemonSets would deploy on each node."""
    config, notes_read = operator_config_of(objects, nodes)
    if config is None:
        return OperatorView(None, {}, notes_read)
    if objects.daemonsets is None:
        return OperatorView(config, {}, (objects.ds_note,) if objects.ds_note else ())
    return OperatorView(config, planned_of(objects.daemonsets, nodes), (), daemonsets_read=True)


def planned_of(daemonsets: list[dict[str, Any]], nodes: Iterable[NodeFacts]) -> dict[str, tuple[str, str]]:
    """node -> (namespace/DaemonSet, driver image) the operator's driver DaemonSets deploy there next."""
    planned: dict[str, tuple[str, str]] = {}
    for n in nodes:
        found = operator_config.daemonset_image(n.labels, daemonsets)
        if found:
            planned[n.name] = found
    return planned

