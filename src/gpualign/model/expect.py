"""One answer to "what driver should this node run?": from the command line's flags or branch-policy file, or from
the GPU Operator's ClusterPolicy/NVIDIADriver objects. Each answer records where it came from, so check, plan and the
controller say why they expect what they expect. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpualign.model.branches import BranchPolicy
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.facts import NodeFacts
from gpualign.model.operator_config import DriverSource, OperatorConfig

DEFAULT_REPOSITORY = "nvcr.io/nvidia/driver"


@dataclass(frozen=True)
class Expectation:
    """The parts of one node's driver image, before the node's kernel and OS are added."""

    origin: str  # clusterpolicy/NAME, nvidiadriver/NAME, flags, policy-file, or inferred (pod or loaded driver)
    repository: str | None
    branch: str | None  # precompiled: the tag's leading part (the branch); regular: the branch, if known
    precompiled: bool = True
    driver_version: str | None = None  # regular images: the full version
    problem: str | None = None  # why no image can be named for this node
    host_managed: str | None = None  # why no driver pod is expected (the operator does not deploy one)
    one_os_tag: bool = False  # the operator's ClusterPolicy mode: one OS tag for every kernel
    module_type: str = "auto"  # kernelModuleType the driver pod is given (gpualign.model.flavours)


Resolver = Callable[[NodeFacts, "DriverPod | None"], Expectation]


def inferred_branch(facts: NodeFacts, pod: DriverPod | None) -> str | None:
    """The branch the node's driver pod is deployed with; else the loaded driver's."""
    if pod and pod.tag and pod.tag.split("-", 1)[0].isdigit():
        return pod.tag.split("-", 1)[0].split(".")[0]
    return facts.driver.branch if facts.driver else None


def from_flags(branches: BranchPolicy, *, repository: str | None, precompiled: bool = True,
               driver_version: str | None = None, policy_file: bool = False) -> Resolver:
    """--driver-branch / --branch-policy first; else the branch of the node's driver pod, else of its loaded driver."""
    repo = repository or DEFAULT_REPOSITORY

    made: dict[tuple[int, str | None, str], Expectation] = {}  # a fleet has few: one object each

    def resolve(facts: NodeFacts, pod: DriverPod | None) -> Expectation:
        rule = branches.rule_for(facts.labels)
        chosen = rule.branch if rule else branches.default
        if chosen:
            origin = "policy-file" if policy_file else "flags"
        else:
            chosen, origin = inferred_branch(facts, pod), "inferred"
        key = (id(rule), chosen, origin)
        if key not in made:
            pool_precompiled = rule.precompiled if rule and rule.precompiled is not None else precompiled
            made[key] = Expectation(origin, repo, chosen, pool_precompiled, driver_version,
                                    module_type=branches.module_type_of(rule) or "auto")
        return made[key]

    return resolve


def from_operator(config: OperatorConfig) -> Resolver:
    """As the operator decides: the NVIDIADriver whose nodeSelector picks the node, else the ClusterPolicy."""

    made: dict[tuple[int, str | None], Expectation] = {}  # a fleet has few: one object each

    def resolve(facts: NodeFacts, pod: DriverPod | None) -> Expectation:
        source, why = config.source_for(facts.labels)
        key = (id(source), why)
        if key not in made:
            made[key] = _of_source(source, why)
        return made[key]

    def _of_source(source: DriverSource | None, why: str | None) -> Expectation:
        if source is None:
            kind = "nvidiadriver" if config.nvidiadriver_mode else "clusterpolicy"
            return Expectation(f"{kind}/-", None, None, problem=why)
        if source.host_managed:
            return Expectation(source.origin, None, None, host_managed=source.host_managed)
        if source.problem:
            return Expectation(source.origin, None, None, problem=source.problem)
        if source.digest:
            return Expectation(source.origin, source.repository, None, False, problem=(
                f"{source.origin} pins the driver image by digest ({source.version}): one image for every node, "
                "which gpualign does not look up in a tag ledger"))
        if source.precompiled:
            return Expectation(source.origin, source.repository, source.version, True, one_os_tag=source.one_os_tag,
                               module_type=source.module_type)
        version = source.version or ""
        return Expectation(source.origin, source.repository, version.split(".", 1)[0], False, version,
                           one_os_tag=source.one_os_tag, module_type=source.module_type)

    return resolve
