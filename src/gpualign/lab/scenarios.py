"""The lab's fleets: small, realistic GPU node mixes described as data."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpualign.errors import BadInput


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
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    branch: str
    nodes: tuple[NodeSpec, ...]
    workloads: bool = True


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


SCENARIOS = {s.name: s for s in (_default(), _empty())}


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise BadInput(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None
