"""A ValidatingAdmissionPolicy that refuses GPU pods (and pod templates) without a driver floor.

Pure CEL run by the API server itself: no webhook to operate. The CUDA table is generated into the expression
from rules/cuda.yaml, the same data `cuda affinity` uses.

A pod has a driver floor when *every* required nodeSelectorTerm (terms are ORed) constrains a GFD driver label.
When it declares its CUDA version (annotation gpualign.io/cuda), each term's implied lower bound must reach that
version's minimum driver. A term's bound per part is its strongest `Gt v` (v+1) or `In` (smallest value), and
part-wise bounds give a lexicographic bound: (major, minor, rev) >= (lb_major, lb_minor, lb_rev).
"""

from __future__ import annotations

from typing import Any, Literal

from gpualign.base import labels as L
from gpualign.model.cuda import table

ANNOTATION = "gpualign.io/cuda"
NAME = "gpualign-cuda-driver-floor"
Mode = Literal["deny", "warn", "audit"]
ACTIONS = {"deny": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}
# The GPU Operator's operands run with the nvidia runtime class and no driver floor: its namespace must be exempt.
# Helm's documented default is gpu-operator; OpenShift's OperatorHub install uses nvidia-gpu-operator.
EXEMPT_NAMESPACES = ("kube-system", "gpu-operator", "nvidia-gpu-operator")


def namespace_selector(exempt: tuple[str, ...] = EXEMPT_NAMESPACES) -> str:
    """Every namespace but the exempt ones, as a label selector on kubernetes.io/metadata.name."""
    return f"kubernetes.io/metadata.name notin ({','.join(exempt)})"

PARTS = {
    "major": [L.DRIVER_CURRENT["major"], L.DRIVER_LEGACY["major"]],
    "minor": [L.DRIVER_CURRENT["minor"], L.DRIVER_LEGACY["minor"]],
    "rev": [L.DRIVER_CURRENT["rev"], L.DRIVER_LEGACY["rev"]],
}
ALL_KEYS = [k for keys in PARTS.values() for k in keys]


def _list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _ge(part: str, bound: str) -> str:
    """CEL: term t bounds `part` from below by at least `bound` (an int expression)."""
    return (f"t.matchExpressions.exists(e, e.key in {_list(PARTS[part])} && "
            f"((e.operator == 'Gt' && int(e.values[0]) + 1 >= {bound}) || "
            f"(e.operator == 'In' && e.values.all(v, int(v) >= {bound}))))")


def cuda_map() -> str:
    """'12.4' → [550, 54, 14], '12.4.1' → [550, 54, 15], …, from the package's CUDA table."""
    t = table()
    entries: list[str] = []
    for version in t.known:
        base = t.minimum[version]
        entries.append(f"'{version}': [{base.major}, {base.minor}, {base.rev or 0}]")
        entries.append(f"'{version}.0': [{base.major}, {base.minor}, {base.rev or 0}]")
        for update, v in sorted(t.updates.get(version, {}).items()):
            entries.append(f"'{version}.{update}': [{v.major}, {v.minor}, {v.rev or 0}]")
    return "{" + ", ".join(entries) + "}"


def _variables() -> list[dict[str, str]]:
    spec = ("object.kind == 'Pod' ? object.spec : object.kind == 'CronJob' ? "
            "object.spec.jobTemplate.spec.template.spec : object.spec.template.spec")
    tmeta = ("object.kind == 'Pod' ? object.metadata : object.kind == 'CronJob' ? "
             "object.spec.jobTemplate.spec.template.metadata : object.spec.template.metadata")
    gpu_resource = "k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-')"
    containers = ("variables.spec.containers + (has(variables.spec.initContainers) ? "
                  "variables.spec.initContainers : [])")
    is_gpu = (f"({containers}).exists(c, has(c.resources) && "
              f"((has(c.resources.limits) && c.resources.limits.exists(k, {gpu_resource})) || "
              f"(has(c.resources.requests) && c.resources.requests.exists(k, {gpu_resource})))) || "
              "(has(variables.spec.runtimeClassName) && variables.spec.runtimeClassName.contains('nvidia'))")
    terms = ("has(variables.spec.affinity) && has(variables.spec.affinity.nodeAffinity) && "
             "has(variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? "
             "variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
             ".nodeSelectorTerms : []")
    has_floor = (f"variables.terms.size() > 0 && variables.terms.all(t, has(t.matchExpressions) && "
                 f"t.matchExpressions.exists(e, e.key in {_list(ALL_KEYS)}))")
    annotation = (f"has(variables.tmeta.annotations) && '{ANNOTATION}' in variables.tmeta.annotations ? "
                  f"variables.tmeta.annotations['{ANNOTATION}'] : "
                  f"has(object.metadata.annotations) && '{ANNOTATION}' in object.metadata.annotations ? "
                  f"object.metadata.annotations['{ANNOTATION}'] : ''")
    ok = (f"{_ge('major', 'variables.minimum[0] + 1')} || ({_ge('major', 'variables.minimum[0]')} && "
          f"({_ge('minor', 'variables.minimum[1] + 1')} || ({_ge('minor', 'variables.minimum[1]')} && "
          f"(variables.minimum[2] <= 0 || {_ge('rev', 'variables.minimum[2]')}))))")
    return [
        {"name": "spec", "expression": spec},
        {"name": "tmeta", "expression": tmeta},
        {"name": "isGpu", "expression": is_gpu},
        {"name": "terms", "expression": terms},
        {"name": "hasFloor", "expression": has_floor},
        {"name": "cuda", "expression": annotation},
        {"name": "table", "expression": cuda_map()},
        {"name": "minimum", "expression": "variables.cuda in variables.table ? variables.table[variables.cuda] "
                                          ": [0, 0, 0]"},
        {"name": "floorReaches", "expression": f"variables.terms.all(t, has(t.matchExpressions) && ({ok}))"},
    ]


def policy() -> dict[str, Any]:
    workloads = ["deployments", "statefulsets", "daemonsets", "replicasets"]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "gpualign"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["pods"]},
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                 "resources": workloads},
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["jobs", "cronjobs"]},
            ]},
            "variables": _variables(),
            "validations": [
                {"expression": "!variables.isGpu || variables.hasFloor",
                 "messageExpression": "'GPU ' + (object.kind == 'Pod' ? 'pod' : object.kind) + ' ' + "
                                      "object.metadata.name + ' has no driver floor: add nodeAffinity "
                                      "(gpualign cuda inject --cuda X)'",
                 "reason": "Invalid"},
                {"expression": "!variables.isGpu || variables.cuda == '' || variables.cuda in variables.table",
                 "messageExpression": f"'{ANNOTATION}: unknown CUDA version ' + variables.cuda",
                 "reason": "Invalid"},
                {"expression": "!variables.isGpu || variables.cuda == '' || !(variables.cuda in variables.table) "
                               "|| !variables.hasFloor || variables.floorReaches",
                 "messageExpression": "'GPU workload declares CUDA ' + variables.cuda + ', which needs driver >= ' "
                                      "+ string(variables.minimum[0]) + '.' + string(variables.minimum[1]) + "
                                      "'.' + string(variables.minimum[2]) + ', but its nodeAffinity admits older "
                                      "drivers: run gpualign cuda inject --cuda ' + variables.cuda",
                 "reason": "Invalid"},
            ],
        },
    }


def binding(mode: Mode, namespace_selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "gpualign"}},
        "spec": {"policyName": NAME, "validationActions": ACTIONS[mode],
                 "matchResources": {"namespaceSelector": namespace_selector}},
    }
