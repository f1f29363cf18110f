"""The lab's fleets: small, realistic GPU node mixes described as data."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpualign.base.errors import BadInput


@dataclass(frozen=True)
class NodeSpec:
    """A node as NFD and GFD would label it. driver=None means no driver loaded yet."""

    name: str
    kernel: str = "5.15.0-124-generic"
    os_id: str = "ubuntu"
    os_version: str = "22.04"
    driver: str | None = None
    gpu: bool = True
    gpus: int = 8
    product: str = "NVIDIA-H100-80GB-HBM3"
    arch: str = "amd64"  # kubernetes.io/arch, as every kubelet labels it
    dra: bool = False  # its GPUs published by NVIDIA's DRA driver (ResourceSlices): no GFD label, no nvidia.com/gpu
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DriverPool:
    """One NVIDIADriver object: the nodes its selector picks get this branch."""

    name: str
    node_selector: dict[str, str]
    branch: str


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    branch: str
    nodes: tuple[NodeSpec, ...]
    workloads: bool = True
    operator: str | None = None  # None: the lab seeds its own driver DaemonSets; else "clusterpolicy"/"nvidiadriver"
    pools: tuple[DriverPool, ...] = ()  # NVIDIADriver objects (operator == "nvidiadriver")
    absent: tuple[str, ...] = ()  # nodes whose driver image is never pushed to the lab registry


def _default() -> Scenario:
    return Scenario(
        name="default",
        description="six GPU nodes (Ubuntu 22.04/24.04; generic, aws, azure and an unpublished gcp kernel) on "
                    "branch 580, one CPU node, a PDB-covered training Deployment, a Job and a web Deployment",
        branch="580",
        nodes=(
            NodeSpec("gpu-a1", "5.15.0-124-generic", "ubuntu", "22.04"),
            NodeSpec("gpu-a2", "5.15.0-124-generic", "ubuntu", "22.04"),
            NodeSpec("gpu-b1", "6.8.0-48-generic", "ubuntu", "24.04"),
            NodeSpec("gpu-c1", "6.8.0-1015-aws", "ubuntu", "22.04", product="NVIDIA-A10G"),
            NodeSpec("gpu-d1", "6.8.0-1017-azure", "ubuntu", "24.04", product="NVIDIA-A100-SXM4-80GB"),
            NodeSpec("gpu-e1", "6.8.0-1015-gcp", "ubuntu", "22.04", product="NVIDIA-L4"),
            NodeSpec("cpu-1", gpu=False),
        ),
    )


def _empty() -> Scenario:
    return Scenario(name="empty", description="no nodes, no workloads: a bare control plane", branch="580",
                    nodes=(), workloads=False)


def _operator_fleet() -> tuple[NodeSpec, ...]:
    """Mixed Ubuntu 22.04/24.04 on four kernels, one RHEL 9.4 node, one CPU node. No driver is loaded yet: the GPU
    Operator deploys it. gpu-m1's image is never pushed."""
    return (
        NodeSpec("gpu-a1", "5.15.0-124-generic", "ubuntu", "22.04", labels={"pool": "train"}),
        NodeSpec("gpu-a2", "5.15.0-124-generic", "ubuntu", "22.04", labels={"pool": "train"}),
        NodeSpec("gpu-c1", "6.8.0-1015-aws", "ubuntu", "22.04", product="NVIDIA-A10G", labels={"pool": "train"}),
        NodeSpec("gpu-b1", "6.8.0-48-generic", "ubuntu", "24.04", labels={"pool": "infer"}),
        NodeSpec("gpu-m1", "6.8.0-1017-azure", "ubuntu", "24.04", product="NVIDIA-A100-SXM4-80GB",
                 labels={"pool": "infer"}),
        NodeSpec("gpu-r1", "5.14.0-427.37.1.el9_4.x86_64", "rhel", "9.4", product="NVIDIA-L40S",
                 labels={"pool": "rhel"}),
        NodeSpec("cpu-1", gpu=False),
    )


def _operator_clusterpolicy() -> Scenario:
    return Scenario(
        name="operator-clusterpolicy",
        description="NVIDIA's GPU Operator (ClusterPolicy, precompiled, branch 580, driver and validator only) on a "
                    "mixed Ubuntu 22.04/24.04 + RHEL 9.4 fleet; gpu-m1's image is absent from the lab registry",
        branch="580", nodes=_operator_fleet(), workloads=False, operator="clusterpolicy", absent=("gpu-m1",))


def _operator_nvidiadriver() -> Scenario:
    return Scenario(
        name="operator-nvidiadriver",
        description="NVIDIA's GPU Operator with one NVIDIADriver per pool (train 580, infer 595, rhel 580; "
                    "precompiled) on the same mixed fleet; gpu-m1's image is absent from the lab registry",
        branch="580", nodes=_operator_fleet(), workloads=False, operator="nvidiadriver", absent=("gpu-m1",),
        pools=(DriverPool("train", {"pool": "train"}, "580"), DriverPool("infer", {"pool": "infer"}, "595"),
               DriverPool("rhel", {"pool": "rhel"}, "580")))


def _operator_debian() -> Scenario:
    """Debian 12 on a kernel whose headers Debian's archive carries: an image holding modules is loaded as that
    kernel would load it (lab/kernel_load.py). The fleet's own images are the lab's synthetic ones (no modules, so
    tag-only: seeding it costs no compile); what `gpualign ensure` builds holds NVIDIA's real modules."""
    return Scenario(
        name="operator-debian",
        description="NVIDIA's GPU Operator with an NVIDIADriver (535, precompiled) for a Debian 12 fleet on "
                    "6.1.0-47-amd64 and 6.1.0-47-cloud-amd64; an image holding modules is loaded as the node's "
                    "kernel would load it",
        branch="535", workloads=False, operator="nvidiadriver",
        nodes=(NodeSpec("deb-a1", "6.1.0-47-amd64", "debian", "12", labels={"pool": "debian"}),
               NodeSpec("deb-a2", "6.1.0-47-amd64", "debian", "12", labels={"pool": "debian"}),
               NodeSpec("deb-c1", "6.1.0-47-cloud-amd64", "debian", "12", product="NVIDIA-L4",
                        labels={"pool": "debian"}),
               NodeSpec("cpu-1", "6.1.0-47-amd64", "debian", "12", gpu=False)),
        pools=(DriverPool("debian", {"pool": "debian"}, "535"),))


def _dra() -> Scenario:
    """The GPU Operator's DRA mode: no gpu-feature-discovery, NVIDIA's DRA driver publishing the GPUs."""
    return Scenario(
        name="dra",
        description="three GPU nodes whose GPUs NVIDIA's DRA driver publishes in ResourceSlices (no GFD labels), "
                    "their drivers installed on the host: dra-550a and dra-550b on 550.163.01 (CUDA 12.4), dra-580 "
                    "on 580.65.06 (CUDA 13.0); the DeviceClasses gpu.nvidia.com and mig.nvidia.com; no workloads",
        branch="580", workloads=False,
        nodes=tuple(NodeSpec(name, driver=driver, dra=True, labels={"nvidia.com/gpu.deploy.driver": "false"})
                    for name, driver in (("dra-550a", "550.163.01"), ("dra-550b", "550.163.01"),
                                         ("dra-580", "580.65.06"))))


def _dra_driver_pods() -> Scenario:
    """GPUs published by NVIDIA's DRA driver, and the driver loaded by driver pods: a walk taints GPUs, not nodes."""
    return Scenario(
        name="dra-driver-pods",
        description="two GPU nodes whose GPUs NVIDIA's DRA driver publishes in ResourceSlices (no GFD labels, no "
                    "nvidia.com/gpu), their driver run by driver DaemonSet pods on branch 550: dra-p1 and dra-p2; "
                    "the DeviceClasses gpu.nvidia.com and mig.nvidia.com; one CPU node; no workloads",
        branch="550", workloads=False,
        nodes=(NodeSpec("dra-p1", dra=True), NodeSpec("dra-p2", dra=True), NodeSpec("cpu-1", gpu=False)))


SCENARIOS = {s.name: s for s in (_default(), _empty(), _operator_clusterpolicy(), _operator_nvidiadriver(),
                                 _operator_debian(), _dra(), _dra_driver_pods())}


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise BadInput(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None
