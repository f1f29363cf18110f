"""The admission policy's CEL, evaluated with cel-python against a table of specs and a property.

The lab test runs the same policy in the real API server; this one covers many more cases quickly.
"""

from __future__ import annotations

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpualign.model.cuda import minimum_driver, selector_terms, table
from gpualign.model.cuda_policy import policy

ENV = celpy.Environment()
POLICY = policy()["spec"]
PROGRAMS = [(v["name"], ENV.program(ENV.compile(v["expression"]))) for v in POLICY["variables"]]
CHECKS = [(ENV.program(ENV.compile(v["expression"])), ENV.program(ENV.compile(v["messageExpression"])))
          for v in POLICY["validations"]]


def evaluate(obj: dict) -> list[str]:
    """The messages of every validation the object fails ([] = admitted)."""
    cel_obj = celpy.json_to_cel(obj)
    variables: dict = {}
    for name, prg in PROGRAMS:
        ctx = {"object": cel_obj, "variables": celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})}
        variables[name] = prg.evaluate(ctx)
    ctx = {"object": cel_obj, "variables": celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})}
    return [str(msg.evaluate(ctx)) for check, msg in CHECKS if not check.evaluate(ctx)]


def deployment(*, gpu: str | None = "nvidia.com/gpu", terms: list | None = None, cuda: str | None = None,
               runtime: str | None = None, kind: str = "Deployment") -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {gpu: "1"}} if gpu else {}}]}
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if runtime:
        spec["runtimeClassName"] = runtime
    meta = {"annotations": {"gpualign.io/cuda": cuda}} if cuda else {}
    if kind == "Pod":
        return {"kind": "Pod", "metadata": {"name": "p", **meta}, "spec": spec}
    if kind == "CronJob":
        return {"kind": "CronJob", "metadata": {"name": "cj"},
                "spec": {"jobTemplate": {"spec": {"template": {"metadata": meta, "spec": spec}}}}}
    return {"kind": kind, "metadata": {"name": "d"}, "spec": {"template": {"metadata": meta, "spec": spec}}}


def floor(cuda: str, labels: str = "both") -> list:
    return selector_terms(minimum_driver(cuda), labels)


NO_FLOOR = ("has no driver floor: its nodeAffinity must bound the driver version from below in every term (Gt or In "
            "on nvidia.com/cuda.driver-version.major; Exists admits any driver), or on a DRA cluster it must ask only "
            "for an extended resource a floored DeviceClass maps: gpualign cuda inject --cuda X")


def no_floor(what: str) -> list[str]:
    return [f"GPU {what} {NO_FLOOR}"]


@pytest.mark.parametrize("obj,refused", [
    (deployment(gpu=None), []),
    (deployment(), no_floor("Deployment d")),
    (deployment(kind="Pod"), no_floor("pod p")),
    (deployment(gpu="nvidia.com/mig-1g.10gb", kind="CronJob"), no_floor("CronJob cj")),
    (deployment(gpu=None, runtime="nvidia"), no_floor("Deployment d")),
    (deployment(terms=floor("12.4")), []),
    (deployment(terms=floor("12.4", "legacy")), []),
    (deployment(terms=[{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]),
     no_floor("Deployment d")),
    # review 6's M5: a term on the driver's labels that bounds nothing is no floor
    (deployment(terms=[{"matchExpressions": [{"key": "nvidia.com/cuda.driver.major", "operator": "Exists"}]}],
                kind="Pod"), no_floor("pod p")),
    (deployment(terms=[{"matchExpressions": [{"key": "nvidia.com/cuda.driver-version.major",
                                              "operator": "NotIn", "values": ["470"]}]}]), no_floor("Deployment d")),
    (deployment(terms=[{"matchExpressions": [{"key": "nvidia.com/cuda.driver-version.minor", "operator": "Gt",
                                              "values": ["10"]}]}]), no_floor("Deployment d")),
    (deployment(terms=[*floor("12.4"), {"matchExpressions": [{"key": "nvidia.com/cuda.driver.major",
                                                              "operator": "Exists"}]}]), no_floor("Deployment d")),
    (deployment(terms=floor("12.8"), cuda="12.8"), []),
    (deployment(terms=floor("12.2"), cuda="12.8"), ["GPU workload declares CUDA 12.8, which needs driver >= "
                                                    "570.26.0, but its nodeAffinity admits older drivers: run "
                                                    "gpualign cuda inject --cuda 12.8"]),
    (deployment(terms=floor("12.8"), cuda="12.7"), ["gpualign.io/cuda: unknown CUDA version 12.7"]),
    (deployment(gpu=None, cuda="12.7"), []),
])
def test_policy_table(obj, refused):
    assert evaluate(obj) == refused


versions = st.sampled_from([v for v in table().known] + [f"{v}.{u}" for v, ups in table().updates.items()
                                                          for u in ups])


@settings(max_examples=60, deadline=None)
@given(floor_cuda=versions, declared=versions, labels=st.sampled_from(["legacy", "current", "both"]))
def test_declared_cuda_is_admitted_exactly_when_the_floor_reaches_it(floor_cuda, declared, labels):
    obj = deployment(terms=floor(floor_cuda, labels), cuda=declared)
    admitted = evaluate(obj) == []

    def key(v):  # a missing revision bounds like 0
        return (v.major, v.minor, v.rev or 0)

    assert admitted == (key(minimum_driver(floor_cuda)) >= key(minimum_driver(declared)))


# -- pods floored by a DeviceClass's extended resource (DRA's extended-resource mapping, Kubernetes 1.37) ------------
def evaluate_with(policy_spec: dict, obj: dict) -> list[str]:
    programs = [(v["name"], ENV.program(ENV.compile(v["expression"]))) for v in policy_spec["variables"]]
    checks = [(ENV.program(ENV.compile(v["expression"])), ENV.program(ENV.compile(v["messageExpression"])))
              for v in policy_spec["validations"]]
    cel_obj = celpy.json_to_cel(obj)
    variables: dict = {}
    for name, prg in programs:
        variables[name] = prg.evaluate({"object": cel_obj, "variables": celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})})
    ctx = {"object": cel_obj, "variables": celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})}
    return [str(msg.evaluate(ctx)) for check, msg in checks if not check.evaluate(ctx)]


CLASSED = policy({"nvidia.com/gpu": minimum_driver("12.4"), "example.com/gpu-cuda-12.8": minimum_driver("12.8")})[
    "spec"]


def test_a_pod_asking_only_for_what_a_floored_class_maps_needs_no_node_affinity():
    assert evaluate_with(CLASSED, deployment()) == []  # nvidia.com/gpu, mapped by a class floored at CUDA 12.4
    assert evaluate_with(CLASSED, deployment(gpu="example.com/gpu-cuda-12.8")) == []
    assert evaluate(deployment()) != []  # without the mapping: no floor
    # a runtime class alone, or a MIG resource no class maps, still needs its nodeAffinity floor
    assert evaluate_with(CLASSED, deployment(gpu=None, runtime="nvidia")) != []
    assert evaluate_with(CLASSED, deployment(gpu="nvidia.com/mig-1g.10gb")) != []


def test_a_declared_cuda_above_the_classs_floor_is_refused_naming_the_class():
    assert evaluate_with(CLASSED, deployment(gpu="example.com/gpu-cuda-12.8", cuda="12.8")) == []
    assert evaluate_with(CLASSED, deployment(cuda="12.4")) == []
    refused = evaluate_with(CLASSED, deployment(cuda="12.8"))  # nvidia.com/gpu's class is floored at 12.4 only
    assert len(refused) == 1 and "DeviceClass floor is lower" in refused[0], refused


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(table().known)), st.sampled_from(sorted(table().known)))
def test_a_class_floor_admits_exactly_the_cuda_versions_it_reaches(floor, declared):
    spec = policy({"example.com/gpu": minimum_driver(floor)})["spec"]
    admitted = evaluate_with(spec, deployment(gpu="example.com/gpu", cuda=declared)) == []
    assert admitted == (minimum_driver(floor) >= minimum_driver(declared))
