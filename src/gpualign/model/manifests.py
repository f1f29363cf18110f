"""Add a CUDA driver floor to every GPU pod template in a multi-document YAML, and to every DRA claim for NVIDIA
GPUs, keeping comments and key order. A template that asks for no GPU is left as it is (pinned to GPU nodes it would
take their capacity), and so is every kind without a pod template or claim gpualign edits.

In a pod template the requirement is ANDed into every existing required nodeSelectorTerm (a cross product, since
terms are ORed), preferred terms are kept, and terms gpualign wrote before are replaced, so injecting twice changes
nothing. A pod whose GPUs come from resource claims gets no nodeAffinity (its nodes carry no GFD labels): its
ResourceClaimTemplates and ResourceClaims get the device selector of gpualign.model.dra_floor instead.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from gpualign.base.errors import BadInput
from gpualign.model import dra_floor
from gpualign.model.cuda import DRIVER_KEYS
from gpualign.model.gpu_pods import gpu_request
from gpualign.model.version import DriverVersion

POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
}
# Kinds with no pod template that often sit beside workloads: passed through untouched.
NO_POD_TEMPLATE = frozenset({
    "Namespace", "Service", "ConfigMap", "Secret", "ServiceAccount", "PodDisruptionBudget", "Role", "RoleBinding",
    "ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim", "PersistentVolume", "Ingress", "NetworkPolicy",
    "HorizontalPodAutoscaler", "PriorityClass", "LimitRange", "ResourceQuota", "StorageClass", "RuntimeClass",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition", "DeviceClass",
})
# DRA claims, and where their spec is
CLAIM_SPEC_PATHS: dict[str, tuple[str, ...]] = {"ResourceClaim": ("spec",), "ResourceClaimTemplate": ("spec", "spec")}


def _yaml(offset: int) -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=offset + 2, offset=offset)
    y.explicit_start = None
    # `[{name: gpu}]` stays as written, not ruamel's compact `[name: gpu]`: a diff shows only the floor
    y.brace_single_entry_mapping_in_flow_sequence = True
    # Plain YAML for review and GitOps: a value used twice is written out twice, never as an anchor and alias.
    y.representer.ignore_aliases = lambda *_: True
    return y


def _style_for(text: str) -> YAML:
    """Pick the sequence indentation the file already uses, so a round trip changes only what we change."""
    for offset in (2, 0):
        y = _yaml(offset)
        try:
            docs = list(y.load_all(text))
        except YAMLError:
            break
        out = io.StringIO()
        y.dump_all(docs, out)
        if out.getvalue() == text:
            return y
    return _yaml(2 if "\n  - " in text or "\n    - " in text else 0)


def _load(text: str, source: str) -> tuple[YAML, list[Any]]:
    y = _yaml(2)
    try:
        docs = list(y.load_all(text))
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        from gpualign.base.yamlio import _problem

        raise BadInput(f"{where}: invalid YAML: {_problem(err)}") from None
    return _style_for(text), docs


def _pod_specs(doc: Any, source: str, passed: list[str]) -> Iterator[tuple[str, CommentedMap]]:
    """(what, pod spec) of each pod template in a document; a kind with none is passed through (named in `passed`
    when it is not one of the plain kinds that often sit beside workloads)."""
    known = getattr(getattr(doc, "lc", None), "line", None)  # a scalar document ("=") has no line recorded
    line = known + 1 if isinstance(known, int) else "?"
    if not isinstance(doc, dict):
        raise BadInput(f"{source}:{line}: a document is not a Kubernetes object")
    kind = doc.get("kind")
    if kind == "List":
        for item in doc.get("items") or []:
            yield from _pod_specs(item, source, passed)
        return
    if kind in NO_POD_TEMPLATE:
        return
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    what = f"{source}:{line}: {kind} {name or '(unnamed)'}"
    if kind not in POD_SPEC_PATHS:
        passed.append(f"{what}: not a kind with a pod template gpualign edits: passed through as it is")
        return
    node: Any = doc
    at = line  # the line of the deepest key reached: where the missing part belongs
    for key in POD_SPEC_PATHS[kind]:
        if isinstance(node, dict) and key in node and hasattr(node, "lc"):
            at = node.lc.key(key)[0] + 1
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            raise BadInput(f"{source}:{at}: {kind} has no {'.'.join(POD_SPEC_PATHS[kind])}")
        node = node[key]
    yield what, node


def _strip_ours(term: Any) -> CommentedMap:
    kept = CommentedMap((k, v) for k, v in term.items() if k != "matchExpressions")
    exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") not in DRIVER_KEYS]
    if exprs:
        kept["matchExpressions"] = exprs
    return kept


def merge_required(existing: list[Any], ours: list[dict[str, Any]]) -> list[Any]:
    """(E1 or E2) and (T1 or T2) = E1T1 or E1T2 or E2T1 or E2T2, after removing earlier injections."""
    bases: list[CommentedMap] = []
    for term in existing:
        stripped = _strip_ours(term)
        if (stripped.get("matchExpressions") or stripped.get("matchFields")) and stripped not in bases:
            bases.append(stripped)
    if not bases:
        return [CommentedMap(matchExpressions=copy.deepcopy(list(t["matchExpressions"]))) for t in ours]
    merged: list[Any] = []
    for base in bases:
        for t in ours:
            term = copy.deepcopy(base)
            term["matchExpressions"] = copy.deepcopy(list(base.get("matchExpressions") or [])) + \
                copy.deepcopy(list(t["matchExpressions"]))
            merged.append(term)
    return merged


def inject_into_spec(spec: CommentedMap, terms: list[dict[str, Any]]) -> None:
    affinity = spec.setdefault("affinity", CommentedMap())
    node_aff = affinity.setdefault("nodeAffinity", CommentedMap())
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", CommentedMap())
    required["nodeSelectorTerms"] = merge_required(required.get("nodeSelectorTerms") or [], terms)


def _objects(doc: Any) -> Iterator[Any]:
    """The objects of a document (a List's items)."""
    if isinstance(doc, dict) and doc.get("kind") == "List":
        for item in doc.get("items") or []:
            yield from _objects(item)
    elif doc is not None:
        yield doc


def device_classes(text: str, source: str) -> list[Any]:
    """The DeviceClasses a manifest defines (a class over NVIDIA's driver makes its claims NVIDIA's). Raises
    BadInput for text that is not YAML."""
    _, docs = _load(text, source)
    return [o for doc in docs for o in _objects(doc) if isinstance(o, dict) and o.get("kind") == "DeviceClass"]


def _claim_spec(obj: Any, source: str) -> tuple[str, CommentedMap] | None:
    """(what, the claim's spec) of a ResourceClaim or ResourceClaimTemplate, None for another kind."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if kind not in CLAIM_SPEC_PATHS:
        return None
    known = getattr(getattr(obj, "lc", None), "line", None)
    line = known + 1 if isinstance(known, int) else "?"
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    node: Any = obj
    for key in CLAIM_SPEC_PATHS[kind]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            raise BadInput(f"{source}:{line}: {kind} has no {'.'.join(CLAIM_SPEC_PATHS[kind])}")
        node = node[key]
    return f"{source}:{line}: {kind} {name or '(unnamed)'}", node


def ask_extended(spec: CommentedMap, name: str) -> bool:
    """A pod spec's nvidia.com/gpu requests and limits, every container's, renamed to `name` (the extended resource
    a floored DeviceClass maps): True when one was. Idempotent."""
    renamed = False
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = c.get("resources") if isinstance(c, dict) else None
        for part in ("limits", "requests"):
            asked = resources.get(part) if isinstance(resources, dict) else None
            if isinstance(asked, CommentedMap) and GPU_RESOURCE in asked:  # where it was, its comment kept
                where = list(asked).index(GPU_RESOURCE)
                comment = asked.ca.items.pop(GPU_RESOURCE, None)
                asked.insert(where, name, asked.pop(GPU_RESOURCE))
                if comment is not None:
                    asked.ca.items[name] = comment
                renamed = True
    return renamed


GPU_RESOURCE = "nvidia.com/gpu"


def _asks(spec: CommentedMap, name: str) -> bool:
    """Whether a container of the pod spec asks for `name` already (a second inject)."""
    return any(isinstance(c, dict) and isinstance(c.get("resources"), dict) and any(
        isinstance(c["resources"].get(p), dict) and name in c["resources"][p] for p in ("limits", "requests"))
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])])


def inject(text: str, terms: list[dict[str, Any]], source: str, minimum: DriverVersion,
           classes: frozenset[str] = dra_floor.NVIDIA_CLASSES,
           extended: str | None = None) -> tuple[str, int, int, list[str]]:
    """The new text, how many pod templates and how many DRA claim requests (for `classes`) got the floor, and what
    was left as it was, each with why (a template that asks for no GPU, one whose GPUs come from DRA claims, a claim
    for other devices, a kind gpualign does not edit). extended: pods asking for nvidia.com/gpu ask for this
    extended resource instead (a floored DeviceClass maps it), with no nodeAffinity. Raises BadInput, writes
    nothing."""
    y, docs = _load(text, source)
    count = claims = 0
    left: list[str] = []
    specs: list[tuple[str, CommentedMap]] = []
    floored: set[str] = set()  # the claims and claim templates floored here, by name
    for doc in docs:
        for obj in _objects(doc):
            claim = _claim_spec(obj, source)
            if claim is None:
                specs.extend(_pod_specs(obj, source, left))
                continue
            what, spec = claim
            asked = dra_floor.nvidia_requests(spec, classes)
            if not asked:
                left.append(f"{what}: requests no device of an NVIDIA class ({', '.join(sorted(classes))}; "
                            "--device-class names another): left as it is")
            else:
                floored.add(str((obj.get("metadata") or {}).get("name")))
            for request in asked:
                dra_floor.set_floor(request, minimum, CommentedMap)
                claims += 1
    for what, spec in specs:
        asks = gpu_request(spec)
        if extended is not None and _asks(spec, extended):  # renamed by an earlier inject: floored by its class
            count += 1
            continue
        if asks is None:
            left.append(f"{what}: asks for no NVIDIA GPU (nvidia.com/gpu or mig resources, an nvidia runtimeClass, "
                        "resource claims): left as it is, free to run on any node")
        elif asks == "claims":
            named = [str(c.get("resourceClaimTemplateName") or c.get("resourceClaimName") or "")
                     for c in spec.get("resourceClaims") or [] if isinstance(c, dict)]
            elsewhere = [n for n in named if n and n not in floored]
            if elsewhere:
                left.append(f"{what}: its GPUs come from resource claims (DRA), whose nodes carry no GFD labels: "
                            f"no nodeAffinity is added; the floor belongs in {', '.join(elsewhere)}, not in this "
                            "input: inject them too")
        elif extended is not None and asks == "resources":
            if ask_extended(spec, extended):
                count += 1
            else:
                left.append(f"{what}: asks for GPUs by another name than {GPU_RESOURCE} (MIG resources): "
                            f"left as it is; --extended-resource renames {GPU_RESOURCE} only")
        else:
            inject_into_spec(spec, terms)
            count += 1
    out = io.StringIO()
    y.dump_all(docs, out)
    return out.getvalue(), count, claims, left
