"""A ValidatingAdmissionPolicy that refuses GPU pods (and pod templates) without a driver floor.

Pure CEL run by the API server itself: no webhook to operate. The CUDA table is generated into the expression
from rules/cuda.yaml, the same data `cuda affinity` uses.

A pod has a driver floor when *every* required nodeSelectorTerm (terms are ORed) constrains a GFD driver label.
When it declares its CUDA version (annotation gpualign.io/cuda), each term's implied lower bound must reach that
version's minimum driver. A term's bound per part is its strongest `Gt v` (v+1) or `In` (smallest value), and
part-wise bounds give a lexicographic bound: (major, minor, rev) >= (lb_major, lb_minor, lb_rev).

Under DRA the floor is in the claim, not the pod (a pod whose GPUs come from resource claims is not asked for a
nodeAffinity): a second policy (`claims_policy`) refuses a ResourceClaim or ResourceClaimTemplate whose request for
an NVIDIA device class has no driverVersion floor (gpualign.model.dra_floor), and, when the claim declares its
CUDA version, a floor below that version's minimum driver.
"""

from __future__ import annotations

from typing import Any, Literal

from gpualign.base import labels as L
from gpualign.model import dra_floor
from gpualign.model.cuda import table
from gpualign.model.version import DriverVersion

ANNOTATION = "gpualign.io/cuda"
NAME = "gpualign-cuda-driver-floor"
CLAIMS_NAME = "gpualign-cuda-driver-floor-claims"
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


def _extended_map(floors: dict[str, DriverVersion]) -> str:
    """CEL: the extended resources floored DeviceClasses map, each to its minimum driver [major, minor, rev]."""
    return "{" + ", ".join(f"'{name}': [{v.major}, {v.minor}, {v.rev or 0}]"
                           for name, v in sorted(floors.items())) + "}"


def _variables(extended: dict[str, DriverVersion] | None = None) -> list[dict[str, str]]:
    spec = ("object.kind == 'Pod' ? object.spec : object.kind == 'CronJob' ? "
            "object.spec.jobTemplate.spec.template.spec : object.spec.template.spec")
    tmeta = ("object.kind == 'Pod' ? object.metadata : object.kind == 'CronJob' ? "
             "object.spec.jobTemplate.spec.template.metadata : object.spec.template.metadata")
    gpu_resource = "k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-') || k in variables.extended"
    containers = ("variables.spec.containers + (has(variables.spec.initContainers) ? "
                  "variables.spec.initContainers : [])")

    def keys(test: str, quantifier: str = "exists") -> str:
        """CEL: some (exists) or every (all) resource key of a container's limits and requests passes `test`."""
        joiner = "||" if quantifier == "exists" else "&&"
        return (f"((has(c.resources) && has(c.resources.limits) ? c.resources.limits.{quantifier}(k, {test}) : "
                f"{'false' if quantifier == 'exists' else 'true'}) {joiner} "
                f"(has(c.resources) && has(c.resources.requests) ? c.resources.requests.{quantifier}(k, {test}) : "
                f"{'false' if quantifier == 'exists' else 'true'}))")

    is_gpu = (f"({containers}).exists(c, {keys(gpu_resource)}) || "
              "(has(variables.spec.runtimeClassName) && variables.spec.runtimeClassName.contains('nvidia'))")
    # floored by a DeviceClass: every GPU resource asked is one a floored class maps, and no runtime class alone
    by_class = (f"({containers}).exists(c, {keys('k in variables.extended')}) && "
                f"({containers}).all(c, {keys(f'!({gpu_resource}) || k in variables.extended', 'all')})")
    m = "variables.minimum"
    f = "variables.extended[k]"
    class_reaches = (f"({containers}).all(c, " + keys(
        f"!(k in variables.extended) || {f}[0] > {m}[0] || ({f}[0] == {m}[0] && ({f}[1] > {m}[1] || "
        f"({f}[1] == {m}[1] && {f}[2] >= {m}[2])))", "all") + ")")
    terms = ("has(variables.spec.affinity) && has(variables.spec.affinity.nodeAffinity) && "
             "has(variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? "
             "variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
             ".nodeSelectorTerms : []")
    # a floor bounds the driver's major version from below: Gt, or In with versions (never Exists, DoesNotExist,
    # NotIn or Lt, which admit any driver); every term must, since the scheduler takes any one of them
    has_floor = (f"variables.terms.size() > 0 && variables.terms.all(t, has(t.matchExpressions) && "
                 f"t.matchExpressions.exists(e, e.key in {_list(PARTS['major'])} && "
                 "(e.operator == 'Gt' || e.operator == 'In') && has(e.values) && e.values.size() > 0))")
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
        {"name": "extended", "expression": _extended_map(extended or {})},
        {"name": "isGpu", "expression": is_gpu},
        {"name": "byClass", "expression": by_class},
        {"name": "terms", "expression": terms},
        {"name": "hasFloor", "expression": has_floor},
        {"name": "cuda", "expression": annotation},
        {"name": "table", "expression": cuda_map()},
        {"name": "minimum", "expression": "variables.cuda in variables.table ? variables.table[variables.cuda] "
                                          ": [0, 0, 0]"},
        {"name": "floorReaches", "expression": f"variables.terms.all(t, has(t.matchExpressions) && ({ok}))"},
        {"name": "classReaches", "expression": class_reaches},
    ]


def policy(extended: dict[str, DriverVersion] | None = None) -> dict[str, Any]:
    """extended: the extended resources floored DeviceClasses map (`cuda deviceclass --extended-resource`), each to
    its class's minimum driver: a pod asking only for those is floored by its class, and needs no nodeAffinity."""
    workloads = ["deployments", "statefulsets", "daemonsets", "replicasets"]
    return _policy(NAME, [_writes("", ["pods"]), _writes("apps", workloads), _writes("batch", ["jobs", "cronjobs"])],
                   _variables(extended), [
                {"expression": "!variables.isGpu || variables.hasFloor || variables.byClass",
                 "messageExpression": "'GPU ' + (object.kind == 'Pod' ? 'pod' : object.kind) + ' ' + "
                                      "object.metadata.name + ' has no driver floor: its nodeAffinity must "
                                      "bound the driver version from below in every term (Gt or In on "
                                      f"{L.DRIVER_CURRENT['major']}; Exists admits any driver), or on a DRA cluster "
                                      "it must ask only for an extended resource a floored DeviceClass maps: "
                                      "gpualign cuda inject --cuda X'",
                 "reason": "Invalid"},
                {"expression": "!variables.isGpu || variables.cuda == '' || variables.cuda in variables.table",
                 "messageExpression": f"'{ANNOTATION}: unknown CUDA version ' + variables.cuda",
                 "reason": "Invalid"},
                {"expression": "!variables.isGpu || variables.cuda == '' || !(variables.cuda in variables.table) "
                               "|| (variables.byClass ? variables.classReaches : "
                               "(!variables.hasFloor || variables.floorReaches))",
                 "messageExpression": "'GPU workload declares CUDA ' + variables.cuda + ', which needs driver >= ' "
                                      "+ string(variables.minimum[0]) + '.' + string(variables.minimum[1]) + "
                                      "'.' + string(variables.minimum[2]) + ', but its ' + (variables.byClass ? "
                                      "'DeviceClass floor is lower' : 'nodeAffinity admits older drivers') + ': run "
                                      "gpualign cuda inject --cuda ' + variables.cuda",
                 "reason": "Invalid"},
    ])


def _writes(group: str, resources: list[str]) -> dict[str, Any]:
    """A resource rule matching creates and updates of these v1 resources of the group."""
    return {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": resources}


def _policy(name: str, rules: list[dict[str, Any]], variables: list[dict[str, Any]],
            validations: list[dict[str, Any]]) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of gpualign's that fails closed."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpualign"}},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules}, "variables": variables,
                 "validations": validations},
    }


def binding(mode: Mode, namespace_selector: dict[str, Any], name: str = NAME) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpualign"}},
        "spec": {"policyName": name, "validationActions": ACTIONS[mode],
                 "matchResources": {"namespaceSelector": namespace_selector}},
    }


def _floored(x: str) -> str:
    """CEL: request (or alternative) x carries gpualign's driverVersion floor."""
    return (f"(has({x}.selectors) && {x}.selectors.exists(s, has(s.cel) && "
            f"s.cel.expression.startsWith(\"{dra_floor.PREFIX}\")))")


def _reaches(x: str) -> str:
    """CEL: x's floor is at least variables.minimum (its version read back from the expression)."""
    part = ("int(s.cel.expression.split(\"semver('\")[1].split(\"'\")[0].split('.')[{i}])")
    a, b, c = (part.format(i=i) for i in range(3))
    m = "variables.minimum"
    return (f"({x}.selectors.exists(s, has(s.cel) && s.cel.expression.startsWith(\"{dra_floor.PREFIX}\") && "
            f"({a} > {m}[0] || ({a} == {m}[0] && ({b} > {m}[1] || ({b} == {m}[1] && {c} >= {m}[2]))))))")


def _each_nvidia_request(test: str, classes: list[str]) -> str:
    """CEL: every request of the claim for one of `classes` (exactly, or a firstAvailable alternative) passes
    `test` (a format with {x} for the request)."""
    c = _list(classes)
    return ("variables.requests.all(r, "
            f"(!has(r.exactly) || !(r.exactly.deviceClassName in {c}) || {test.format(x='r.exactly')}) && "
            f"(!has(r.firstAvailable) || r.firstAvailable.all(a, !(a.deviceClassName in {c}) || "
            f"{test.format(x='a')})))")


def claims_policy(classes: list[str] | None = None) -> dict[str, Any]:
    """The policy that refuses a DRA claim for NVIDIA GPUs without a driver floor. classes: the device classes
    whose devices are NVIDIA GPUs (NVIDIA's own, and any of the platform team's)."""
    names = sorted(set(classes or ()) | dra_floor.NVIDIA_CLASSES)
    spec = "object.kind == 'ResourceClaim' ? object.spec : object.spec.spec"
    meta = "object.kind == 'ResourceClaim' ? object.metadata : (has(object.spec.metadata) ? " \
           "object.spec.metadata : object.metadata)"
    annotation = (f"has(variables.cmeta.annotations) && '{ANNOTATION}' in variables.cmeta.annotations ? "
                  f"variables.cmeta.annotations['{ANNOTATION}'] : "
                  f"has(object.metadata.annotations) && '{ANNOTATION}' in object.metadata.annotations ? "
                  f"object.metadata.annotations['{ANNOTATION}'] : ''")
    return _policy(CLAIMS_NAME, [_writes("resource.k8s.io", ["resourceclaims", "resourceclaimtemplates"])], [
                {"name": "cspec", "expression": spec},
                {"name": "cmeta", "expression": meta},
                {"name": "requests", "expression": "has(variables.cspec.devices) && "
                                                   "has(variables.cspec.devices.requests) ? "
                                                   "variables.cspec.devices.requests : []"},
                {"name": "cuda", "expression": annotation},
                {"name": "table", "expression": cuda_map()},
                {"name": "minimum", "expression": "variables.cuda in variables.table ? "
                                                  "variables.table[variables.cuda] : [0, 0, 0]"},
                {"name": "floored", "expression": _each_nvidia_request(_floored("{x}"), names)},
            ], [
                {"expression": "variables.floored",
                 "messageExpression": "object.kind + ' ' + object.metadata.name + ' asks for NVIDIA GPUs with no "
                                      "driver floor: add a driverVersion selector (gpualign cuda inject --cuda X)'",
                 "reason": "Invalid"},
                {"expression": "variables.cuda == '' || variables.cuda in variables.table",
                 "messageExpression": f"'{ANNOTATION}: unknown CUDA version ' + variables.cuda",
                 "reason": "Invalid"},
                {"expression": "variables.cuda == '' || !(variables.cuda in variables.table) || "
                               "!variables.floored || " + _each_nvidia_request(_reaches("{x}"), names),
                 "messageExpression": "object.kind + ' ' + object.metadata.name + ' declares CUDA ' + variables.cuda "
                                      "+ ', which needs driver >= ' + string(variables.minimum[0]) + '.' + "
                                      "string(variables.minimum[1]) + '.' + string(variables.minimum[2]) + ', but "
                                      "its driver floor is lower: run gpualign cuda inject --cuda ' + variables.cuda",
                 "reason": "Invalid"},
            ])
