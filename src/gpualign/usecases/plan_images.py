"""The plan use case: before a kernel, OS or branch change, the images it would need that the ledger lacks, each to
mirror or to build; a node the change cannot apply to is unknown, with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.judging.judge import judge
from gpualign.kube.client import Kube
from gpualign.kube.inventory import read_operator_config
from gpualign.ledger.sources import is_registry
from gpualign.model import selectors
from gpualign.model.branches import BranchPolicy, BranchRule
from gpualign.model.facts import node_facts
from gpualign.model.image_ref import tag_of
from gpualign.model.ledger import Unverified
from gpualign.model.needed_images import images_needed
from gpualign.usecases.nodes import Say, quiet
from gpualign.usecases.refusals import PlanNoLedger, RepositoriesToChoose

if TYPE_CHECKING:
    from gpualign.ledger.sources import Ledger
    from gpualign.model.branches import BranchPolicy
    from gpualign.model.driver_pod_status import DriverPod
    from gpualign.model.facts import NodeFacts
    from gpualign.model.needed_images import Change, NeededImages
    from gpualign.model.tags import Rules
    from gpualign.usecases.nodes import Read


@dataclass(frozen=True)
class PlanSetup:
    """What every cluster of one plan shares."""

    change: Change
    available: Ledger
    repository: str
    rules: Rules
    branches: BranchPolicy
    docker_config: Path | None = None
    warn: Say = quiet
    trusted: tuple[Any, ...] = ()  # the keys a present image must be signed by (none: not checked)


@dataclass(frozen=True)
class Planned:
    """One cluster's (or dump's) plan: the images needed, for which repository, and whether nothing is to do."""

    needed: NeededImages
    repository: str
    clean: bool

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's body."""
        return {**self.needed.as_dict(), "repository": self.repository}


def plan_cluster(read: Read, setup: PlanSetup, selector: str | None = None) -> Planned:
    """One cluster's (or dump's) plan. Present but wrong images (their labels name another build) count as work to
    do, as check and the walk judge them: they must be made again."""
    nodes = read.inventory.nodes
    result = judged_needs(nodes, read.inventory.pods, setup)
    return Planned(result, setup.repository, not (result.to_build or result.unknown or (selector and not nodes)))


def judged_needs(nodes: Sequence[NodeFacts], pods: Mapping[str, DriverPod] | None, setup: PlanSetup) -> NeededImages:
    """The images the nodes need after the change, each present one judged (its labels, modules and signature) as
    check and the walk judge it: plan's answer, and `status --tonight`'s and `why`'s."""
    ledger = setup.available.for_repository(setup.repository)
    result = images_needed(nodes, setup.change, ledger, setup.rules, setup.branches, pods=pods)
    wrong = wrong_in_ledger(result, setup.available, setup.repository, setup.docker_config, setup.warn,
                            setup.trusted)
    if wrong:
        result = images_needed(nodes, setup.change, ledger, setup.rules, setup.branches, wrong, pods=pods)
    return result


def from_operator(kubeconfig: str | None, context: str | None, repository: str | None,
                  timeout: float | None, warn: Say = quiet) -> tuple[list[str], BranchPolicy, str]:
    """No --ledger: the GPU Operator's objects name the image repository (the ledger to read) and each pool's
    branch, as check reads them. (ledger sources, branch policy, repository)."""
    config, sources = _operator_sources(kubeconfig, context, timeout, warn)
    if config is None:
        raise PlanNoLedger("no ledger, and no GPU Operator objects here name the repository")
    repos = sorted({s.repository for s in sources if s.repository})
    if repository is None and len(repos) != 1:
        raise RepositoriesToChoose(repos)
    repo = repository or repos[0]
    return [f"registry://{repo}"], _branches(sources), repo


def operator_branches(kubeconfig: str | None, context: str | None, timeout: float | None,
                      warn: Say = quiet) -> BranchPolicy | None:
    """With --ledger but no branch flag: each pool's branch as the GPU Operator's objects say it, as check reads
    them (None when there are none)."""
    config, sources = _operator_sources(kubeconfig, context, timeout, warn)
    return _branches(sources) if config is not None and sources else None


def _operator_sources(kubeconfig: str | None, context: str | None, timeout: float | None,
                      warn: Say) -> tuple[Any, list[Any]]:
    with Kube(kubeconfig, context, timeout=timeout) as kube:
        facts = tuple(f for f in (node_facts(n) for n in kube.nodes(None, metadata_only=True)) if f.gpu)
        config, notes = read_operator_config(kube, facts)
    for note in notes:
        warn(note)
    if config is None:
        return None, []
    return config, [s for s in config.sources if not s.problem and not s.host_managed and s.repository and s.version]


def _branches(sources: list[Any]) -> BranchPolicy:
    rules = tuple(BranchRule(selectors.parse(",".join(f"{k}={v}" for k, v in sorted(s.node_selector.items()))),
                             (s.version or "").split(".", 1)[0], s.precompiled, s.module_type)
                  for s in sources if s.node_selector)
    default = next((s for s in sources if not s.node_selector), None)
    return BranchPolicy(rules, (default.version or "").split(".", 1)[0] if default else None,
                        default.module_type if default else None)


def wrong_in_ledger(result: NeededImages, available: Ledger, repo: str, docker_config: Path | None,
                    warn: Say = quiet, trusted: tuple[Any, ...] = ()) -> dict[str, str]:
    """tag -> why, for the needed images the (registry) ledger holds whose labels name another build: the same
    judgement check and the walk make (judging/judge.py)."""
    present = [n for n in result.needed if n.in_ledger]
    if not present or not any(is_registry(s) for s in available.sources):
        return {}
    found = judge({f"{repo}:{n.tag}": (n.kernel,) for n in present}, docker_config=docker_config,
                  archs={f"{repo}:{n.tag}": n.archs for n in present}, trusted=trusted)
    for w in found.warnings:
        warn(w)
    wrong = {tag_of(image): why for image, why in found.wrong.items()}
    for image, unchecked in found.unverified.items():  # never checked is work to do, as check and the walk hold it
        wrong.setdefault(tag_of(image), Unverified(f"modules not verified: {unchecked}"))
    unread = "; ".join(found.warnings) or "its registry did not answer"
    for n in present:  # an image that lacks the architecture of a node that will need it is wrong for that node
        if f"{repo}:{n.tag}" not in found.platforms and n.tag not in wrong:  # its config was never read: no judgement
            wrong[n.tag] = Unverified(f"not judged: {unread}")
            continue
        for arch in n.archs:
            why = found.wrong_for(f"{repo}:{n.tag}", arch)
            if why and n.tag not in wrong:
                wrong[n.tag] = why
    return wrong
