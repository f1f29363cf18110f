"""The CUDA floor under Dynamic Resource Allocation, judged by the real kube-scheduler. The lab's `dra` scenario:
three GPU nodes whose GPUs NVIDIA's DRA driver publishes in ResourceSlices (no GFD labels), two on driver 550.163.01
(CUDA 12.4), one on 580.65.06 (CUDA 13.0), and NVIDIA's DeviceClasses. `cuda inject` floors a
ResourceClaimTemplate; the scheduler allocates its pods only devices that meet the floor, or none (with its own
reason); `cuda check` reads each node's driver from its slices; the admission policy refuses an unfloored claim on
the lab's real API server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import scheduled, unscheduled, wait_for

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def dra(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("dra-lab") / "state", scenario="dra")
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    wait_for(lambda: kube.get("/api/v1/namespaces/ml/serviceaccounts/default"), what="default SA")
    yield lab
    run_cli("lab", "down", env=lab.env)


def workload(name: str, cuda: str | None = None) -> str:
    """A claim template for one NVIDIA GPU and a Deployment of three pods claiming from it, as YAML."""
    import io

    from ruamel.yaml import YAML

    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"{name}-gpu", "namespace": "ml",
                             **({"annotations": {"gpualign.io/cuda": cuda}} if cuda else {})},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    pod = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{name}-gpu"}],
           "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
                           "resources": {"claims": [{"name": "gpu"}]}}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml"},
                  "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                           "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}
    out = io.StringIO()
    YAML().dump_all([template, deployment], out)
    return out.getvalue()


def kubectl_apply(lab, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-",
                           *extra], input=text, capture_output=True, text=True)


@contextmanager
def explained(lab) -> Iterator[None]:  # noqa: ANN001 - Lab
    """A scheduling wait that times out says what the lab runs and what the namespace holds: whether the scheduler
    or the claim controller is the one that did not act."""
    try:
        yield
    except AssertionError as err:
        status = lab.cli("lab", "status")
        held = lab.kubectl("get", "pods,resourceclaims,events", "-n", "ml", "-o", "wide")
        raise AssertionError(f"{err}\n--- lab status\n{status.out}{status.err}\n--- namespace ml\n"
                             f"{held.stdout}{held.stderr}") from err


def apply_injected(lab, name: str, cuda: str) -> None:
    injected = lab.cli("cuda", "inject", "--cuda", cuda, "-f", "-", input=workload(name))
    assert injected.code == 0, injected.err
    assert "1 DRA claim request(s) now require driver" in injected.err and "nodeAffinity" not in injected.out
    applied = kubectl_apply(lab, injected.out)
    assert applied.returncode == 0, applied.stderr


def test_cuda_12_8_claims_are_allocated_only_on_the_580_node(dra):
    apply_injected(dra, "cuda128", "12.8")
    kube = dra.kube()
    with explained(dra):
        pods = scheduled(kube, "ml", "cuda128", 3)
    assert {p["spec"]["nodeName"] for p in pods} == {"dra-580"}
    claims = kube.list_raw("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims")
    allocated = [c["status"]["allocation"]["devices"]["results"][0] for c in claims
                 if c["metadata"]["name"].startswith("cuda128-")]
    assert len(allocated) == 3 and {r["pool"] for r in allocated} == {"dra-580"}


def test_cuda_13_1_claims_stay_unscheduled_with_the_schedulers_reason(dra):
    apply_injected(dra, "cuda131", "13.1")
    kube = dra.kube()
    with explained(dra):
        reason = unscheduled(kube, "ml", "cuda131")
    assert "cannot allocate all claims" in reason, reason


def test_cuda_check_reads_each_nodes_driver_from_its_slices(dra):
    res = dra.cli("cuda", "check", "--cuda", "12.8", "-o", "json")
    assert res.code == 1, res.err
    data = json.loads(res.out)
    assert [(n["name"], n["driver"], n["source"]) for n in data["able"]] == [("dra-580", "580.65.06", "dra")]
    assert sorted(n["name"] for n in data["unable"]) == ["dra-550a", "dra-550b"]
    assert {d["cuda"] for d in data["unable"][0]["devices"]} == {"12.4.0"} and data["lowest_driver"] == "550.163.01"
    table = dra.cli("cuda", "check", "--cuda", "12.4")
    assert table.code == 0 and "unknown" not in table.out and "550.163.01 (DRA)" in table.out, table.out


def test_the_admission_policy_refuses_a_claim_without_a_floor_or_below_its_declared_cuda(dra):
    policy = dra.cli("cuda", "policy")
    assert policy.code == 0, policy.err
    applied = kubectl_apply(dra, policy.out)
    assert applied.returncode == 0, applied.stderr
    bare = workload("bare", cuda="12.8").split("---\n")[0]

    def refused(text: str) -> str | None:  # admitted or not, as the API server decides (a server-side dry run)
        res = kubectl_apply(dra, text, "--dry-run=server")
        return res.stderr if res.returncode != 0 else None

    # the policy takes effect once the API server has read it: a claim without a floor is refused
    why = wait_for(lambda: refused(bare), what="the claims policy refusing an unfloored claim template")
    assert "gpualign-cuda-driver-floor-claims" in why and "asks for NVIDIA GPUs with no driver floor" in why
    low = dra.cli("cuda", "inject", "--cuda", "12.4", "-f", "-", input=bare).out
    why = refused(low)
    assert why and "declares CUDA 12.8, which needs driver >= 570.26.0" in why, why
    good = dra.cli("cuda", "inject", "--cuda", "12.8", "-f", "-", input=bare).out
    assert refused(good) is None and kubectl_apply(dra, good).returncode == 0
    # a pod whose GPUs come from claims needs no nodeAffinity: its claims carry the floor
    pod = workload("bare", cuda="12.8").split("---\n")[1]
    assert refused(pod) is None


def test_check_and_why_read_a_dra_nodes_driver_from_its_slices(dra):
    """No GFD label names a driver here: the driver NVIDIA's DRA driver publishes is the node's, everywhere."""
    checked = json.loads(dra.cli("check", "--driver-branch", "580", "--ledger",
                                 f"registry://{dra.registry}/nvidia/driver", "-o", "json").out)
    assert {n["name"]: (n["driver"], n["status"]) for n in checked["nodes"]} == {
        "dra-550a": ("550.163.01", "host-managed"), "dra-550b": ("550.163.01", "host-managed"),
        "dra-580": ("580.65.06", "host-managed")}
    why = dra.cli("why", "dra-580")
    assert why.code == 0 and "version 580.65.06" in why.out and "not a GPU node" not in why.out, why.out


def test_why_names_the_health_taints_nvidias_dra_driver_puts_on_a_gpu(dra):
    """NVIDIA's DRA driver taints a GPU its health checks fail (an XID error, a lost GPU): the API server keeps the
    taint in the slice, and `why` reads it there."""
    kube = dra.kube()
    path = "/apis/resource.k8s.io/v1/resourceslices/dra-550b-gpu.nvidia.com"
    sliced = kube.get(path)
    assert sliced is not None
    sliced["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        sliced["metadata"].pop(key, None)
    kube.apply_at(path, sliced)
    why = dra.cli("why", "dra-550b")
    name = sliced["spec"]["devices"][0]["name"]
    assert f"NVIDIA's DRA driver taints {name}: gpu.nvidia.com/xid=79:NoSchedule" in why.out, why.out
    assert "taints" not in dra.cli("why", "dra-550a").out


def test_a_deviceclass_per_floor_is_honoured_by_the_scheduler(dra):
    """A platform team hands out a class per CUDA floor; a claim through it needs no selector of its own."""
    made = dra.cli("cuda", "deviceclass", "--cuda", "12.8")
    assert made.code == 0, made.err
    assert kubectl_apply(dra, made.out).returncode == 0
    claim = workload("byclass").replace("deviceClassName: gpu.nvidia.com", "deviceClassName: nvidia-gpu-cuda-12-8")
    applied = kubectl_apply(dra, claim)
    assert applied.returncode == 0, applied.stderr
    kube = dra.kube()
    with explained(dra):
        pods = scheduled(kube, "ml", "byclass", 3)
    assert {p["spec"]["nodeName"] for p in pods} == {"dra-580"}


def test_the_controller_reads_a_dra_nodes_driver_from_its_slices_and_follows_them(dra):
    """The controller watches NVIDIA's ResourceSlices: its board names each DRA node's driver, and a slice that
    changes (the DRA driver republishing after a driver upgrade) changes the board within seconds."""
    from tests.support.controller import Controller

    def drivers() -> dict[str, str | None]:
        try:
            board = json.loads(ctl.get("/api/fleet") or "{}")
        except json.JSONDecodeError:
            return {}
        return {n["name"]: n["driver"] for n in board.get("nodes") or []}

    kube = dra.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
    ctl = Controller(dra)
    path = "/apis/resource.k8s.io/v1/resourceslices"
    name = next(s["metadata"]["name"] for s in kube.list_raw(path) if s["spec"].get("nodeName") == "dra-550b")
    item = kube.get(f"{path}/{name}")
    try:
        wait_for(lambda: drivers() == {"dra-550a": "550.163.01", "dra-550b": "550.163.01", "dra-580": "580.65.06"},
                 timeout=20, what="the controller's board naming each DRA node's driver")
        for device in item["spec"]["devices"]:
            device["attributes"]["driverVersion"] = {"version": "580.65.6"}
        kube.patch(f"{path}/{name}", {"spec": {"devices": item["spec"]["devices"]}})
        wait_for(lambda: drivers().get("dra-550b") == "580.65.06", timeout=10,
                 what="the controller following dra-550b's slice to its new driver")
    finally:
        ctl.stop()
        for device in item["spec"]["devices"]:
            device["attributes"]["driverVersion"] = {"version": "550.163.1"}
        kube.patch(f"{path}/{name}", {"spec": {"devices": item["spec"]["devices"]}})


def test_pods_asking_for_an_extended_resource_get_only_the_devices_its_floored_class_maps(dra):
    """DRA's extended-resource mapping (GA in Kubernetes 1.37): a pod that asks for nvidia.com/gpu, with no claim,
    is allocated a DeviceClass's devices. `cuda deviceclass --extended-resource` floors the class, `cuda inject
    --extended-resource` renames a workload's request to it, and `cuda policy --extended-resource NAME=CUDA` admits
    such a pod without a nodeAffinity. Judged by the real scheduler and API server: only the 580 node's GPUs reach
    CUDA 12.8, and the class's pods land there and nowhere else."""
    kube = dra.kube()
    assert dra.kubectl("-n", "ml", "delete", "deployment", "--all", "--wait=true").returncode == 0  # free GPUs
    ours = "example.com/gpu-cuda-12.8"
    for args in (("--extended-resource", ours, "--name", "ext-cuda-12-8"),
                 ("--extended-resource", "nvidia.com/gpu", "--name", "any-gpu-cuda-12-8")):
        made = dra.cli("cuda", "deviceclass", "--cuda", "12.8", *args)
        assert made.code == 0, made.err
        assert kubectl_apply(dra, made.out).returncode == 0
    policy = dra.cli("cuda", "policy", "--extended-resource", f"{ours}=12.8", "--extended-resource",
                     "nvidia.com/gpu=12.8")
    assert policy.code == 0 and kubectl_apply(dra, policy.out).returncode == 0, policy.err

    def deployment(name: str, resource: str, cuda: str | None = None) -> str:
        import io

        from ruamel.yaml import YAML

        meta = {"labels": {"app": name}, **({"annotations": {"gpualign.io/cuda": cuda}} if cuda else {})}
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
                   "metadata": meta, "spec": {"containers": [{
                       "name": "main", "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
                       "resources": {"limits": {resource: "1"}}}]}}}}
        out = io.StringIO()
        YAML().dump(obj, out)
        return out.getvalue()

    # a workload written for nvidia.com/gpu, renamed to the floored class's resource by inject
    injected = dra.cli("cuda", "inject", "--cuda", "12.8", "--extended-resource", ours, "-f", "-",
                       input=deployment("ext", "nvidia.com/gpu"))
    assert injected.code == 0 and ours in injected.out and "nodeAffinity" not in injected.out, injected.err
    with explained(dra):
        applied = kubectl_apply(dra, injected.out)
        assert applied.returncode == 0, applied.stderr
        assert {p["spec"]["nodeName"] for p in scheduled(kube, "ml", "ext", 2, timeout=60)} == {"dra-580"}
        # nvidia.com/gpu itself, mapped by the class floored at 12.8: admitted with no nodeAffinity, on dra-580 only
        plain = kubectl_apply(dra, deployment("plain", "nvidia.com/gpu"))
        assert plain.returncode == 0, plain.stderr
        assert {p["spec"]["nodeName"] for p in scheduled(kube, "ml", "plain", 2, timeout=60)} == {"dra-580"}
    # a workload declaring CUDA 13.0 asks more than the class reaches: refused by the API server, naming the class
    refused = kubectl_apply(dra, deployment("newer", ours, cuda="13.0"))
    assert refused.returncode != 0 and "DeviceClass floor is lower" in refused.stderr, refused.stderr
