"""The controller started from what its command line parsed: the cluster read once (the GPU Operator's objects and
their notes), whether it follows them, what --build needs of the cluster, the rules as this operator names OS tags,
then `run` until it is stopped, over one cluster client. Refusals are typed; the command words them with its
flags."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.controller.build_trigger import preflight
from gpualign.controller.build_trigger.trigger import BuildOptions
from gpualign.controller.run import Options, run
from gpualign.judging.judge import judge
from gpualign.kube.client import Kube
from gpualign.kube.inventory import read_operator_config
from gpualign.ledger import sources
from gpualign.model.branches import BranchPolicy
from gpualign.model.driver_tag import try_parse
from gpualign.model.image_ref import tag_of
from gpualign.model.ledger import Unverified
from gpualign.model.operator_config import OperatorConfig
from gpualign.model.tags import Rules, for_operator
from gpualign.usecases.archive_next import cannot_verify

Warn = Callable[[str], None]


class NoLedger(BadInput):
    """No ledger was named, and no GPU Operator ClusterPolicy names the repository."""


class ArchiveUnverifiable(BadInput):
    """Debian's archive cannot be verified here (`why`), and builds ahead of it were asked for."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NothingToGate(BadInput):
    """The gate was asked for, and no GPU Operator ClusterPolicy is there to gate."""


@dataclass(frozen=True)
class Start:
    kubeconfig: str | None
    context: str | None
    ledger: list[str]  # as given (empty: the GPU Operator's objects name the repositories)
    docker_config: Path | None
    pinned: bool  # a branch, a branch policy or a repository was given: the operator's objects are not followed
    rules: Rules
    branches: BranchPolicy
    operator_version: str | None  # names OS tags as this operator version does (None: the cluster's)
    options: Options  # its builds and archive reading are set here
    # --build: its options, given the operator's objects when they are followed (None: no builds)
    builds: Callable[[OperatorConfig | None], BuildOptions] | None = None
    archive_ahead: bool = False  # builds ahead of the kernels Debian's archive names next
    archive_every: float = 0.0  # seconds between its reads
    gate: bool = False
    build_warning: Warn | None = None  # what --build might trip on (else said through warn)


def start(plan: Start, warn: Warn) -> None:
    """Read, check, then run the controller until it is stopped."""
    with Kube(plan.kubeconfig, plan.context, field_manager="gpualign-controller") as kube:
        config, notes = read_operator_config(kube, ())
        for note in notes:
            warn(note)
        follow = config is not None and not plan.pinned
        if not plan.ledger and not follow:
            raise NoLedger("no ledger, and no GPU Operator ClusterPolicy names the repository")
        builds = None
        if plan.builds is not None:
            builds = plan.builds(config if follow else None)
            for line in preflight.check(kube, builds.settings):
                (plan.build_warning or warn)(line)
            if plan.archive_ahead and (why := cannot_verify()):
                raise ArchiveUnverifiable(why)
        rules, version_note = for_operator(plan.rules, plan.operator_version or (config.version if config else None))
        if version_note:
            warn(version_note)
        if plan.gate:
            gate_possible(config, warn)
        opts = dataclasses.replace(plan.options, builds=builds,
                                   archive_every=plan.archive_every if builds is not None and plan.archive_ahead
                                   else None)

        def load_ledger(current: OperatorConfig | None) -> sources.Ledger | sources.RepoLedgers:
            """The ledger as the operator's objects name it now (a new NVIDIADriver may name a new repository)."""
            if plan.ledger:
                return sources.load(plan.ledger, docker_config=plan.docker_config)
            named = current or config
            assert named is not None
            return sources.load_repositories([s.repository for s in named.sources if s.repository and not s.problem],
                                             docker_config=plan.docker_config)

        run(kube, rules, plan.branches, load_ledger, opts, operator=config, follow_operator=follow,
            judge_image=lambda image, arch, module_type: judged_wrong(image, arch, module_type, plan.docker_config,
                                                                      opts.trusted))


def judged_wrong(image: str, arch: str, module_type: str | None, docker_config: Path | None,
                 trusted: tuple[Any, ...] = ()) -> str | None:
    """Why a present image is wrong for a node of `arch`, judged as plan judges it (gpualign.usecases.plan_images):
    by its labels and platforms against the kernel its tag names, and, when nothing in it says what it was built
    for, unverified, which is wrong too (never present). None when it is right."""
    spec = try_parse(tag_of(image))
    found = judge({image: (spec.kernel,) if spec else ()}, docker_config=docker_config, archs={image: (arch,)},
                  trusted=trusted)
    if (why := found.wrong_for(image, arch, module_type)) is not None:
        return why
    return Unverified(f"modules not verified: {found.unverified[image]}") if image in found.unverified else None


def gate_possible(config: OperatorConfig | None, warn: Warn) -> None:
    """The gate needs the GPU Operator's ClusterPolicy; with its autoUpgrade off, it says so."""
    if config is None:
        raise NothingToGate("no GPU Operator ClusterPolicy found to gate")
    if config.per_driver_upgrades:
        if not any(config.operator_walks(s) for s in config.sources):
            warn("every NVIDIADriver has spec.upgradePolicy.autoUpgrade off: the operator walks no upgrade now; "
                 "the gate labels nodes anyway, so it holds from the moment one turns it on")
    elif not config.auto_upgrade:
        warn(f"ClusterPolicy {config.cluster_policy} "
             + ("has no spec.driver.upgradePolicy" if not config.upgrade_policy
                else "has spec.driver.upgradePolicy.autoUpgrade off")
             + ": the operator walks no upgrade now; the gate labels nodes anyway, so it holds from the moment "
               "autoUpgrade is turned on")
