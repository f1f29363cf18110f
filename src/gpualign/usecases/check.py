"""The check use case: which image every GPU node of one cluster (or dump) needs, and whether the ledger has it,
judged as the upgrade's preflight judges it. `gpualign check` and the fleet report ask it here; the controller asks
the same core (expect, audit, judge) node by node from its watch caches, and its build trigger acts on that audit's
action, so a missing image is `build` or `mirror` by the same code everywhere."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base.collector import held_off
from gpualign.base.errors import GpualignError
from gpualign.ledger import sources
from gpualign.model.audit import AuditInput, Status, assemble, audit, findings_of
from gpualign.model.expect import from_flags, from_operator
from gpualign.model.makers import Maker
from gpualign.model.tags import for_operator
from gpualign.usecases.ledgers import NVIDIA_REPOSITORY, repository_for
from gpualign.usecases.nodes import Say, quiet
from gpualign.usecases.refusals import CheckNoLedger

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpualign.judging.judge import Ahead, Judgement
    from gpualign.ledger.sources import Ledger, RepoLedgers
    from gpualign.model.audit import Audit, AuditInput, Derived, Finding
    from gpualign.model.branches import BranchPolicy
    from gpualign.model.driver_pod_status import DriverPod
    from gpualign.model.facts import NodeFacts
    from gpualign.model.operator_config import OperatorConfig
    from gpualign.model.tags import Rules
    from gpualign.usecases.nodes import Read, Reading


@dataclass(frozen=True)
class Setup:
    """What every cluster of one check shares: the flags, as read and checked once."""

    branches: BranchPolicy
    rules: Rules
    available: Ledger | None  # --ledger, read once; None: each cluster's operator objects name the repositories
    ledger: list[str]
    flags_given: bool
    policy_given: bool
    repository: str | None
    precompiled: bool
    driver_version: str | None
    operator_version: str | None
    docker_config: Path | None
    verify_modules: bool = False  # --verify-modules: pull present images' modules and check them as the kernel would
    trusted: tuple[Any, ...] = ()  # the keys a present image must be signed by (none: signatures not checked)
    # registries read for the operator's repositories, shared by every cluster of one report (read once each)
    repositories_read: dict[str, Ledger] = field(default_factory=dict)
    repositories_lock: threading.Lock = field(default_factory=threading.Lock)
    warn: Say = quiet  # a warning to say at once, outside the report (a --repository in the operator's split form)


@dataclass
class Checked:
    """One cluster's check: the audit, what the GPU Operator's objects said, and what to warn of."""

    audit: Audit
    config: OperatorConfig | None  # the operator's driver configuration, when the cluster has one
    rules: Rules  # the rules as they were applied (for the operator's version)
    ledger_sources: tuple[str, ...]
    notes: list[str]  # what could not be read (RBAC, an unknown version)
    warnings: list[str]  # to say on stderr (the read's own notes are said as soon as it is read)
    node_dicts: list[dict[str, Any]] | None = None  # the findings' dicts, in their order, when made as pages came

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's body: nodes, missing, summary, operator, rules, ledger, warnings."""
        body = self.audit.as_dict(self.node_dicts)
        config = self.config
        body["operator"] = None if config is None else {
            "cluster_policy": config.cluster_policy, "version": config.version,
            "mode": "nvidiadriver" if config.nvidiadriver_mode else "clusterpolicy",
            "sources": [s.origin for s in config.sources]}
        body["rules"] = {"source": self.rules.source, "operator_version": self.rules.operator_version}
        body["ledger"] = list(self.ledger_sources)
        body["warnings"] = self.notes + self.warnings
        return body


def load_deciders(setup: Setup) -> None:
    """Import what deciding a cluster's nodes takes (the audit, and the image judge for a registry ledger), to be
    called while the cluster's LISTs are on the wire: ~25 ms of imports no longer wait for the last page."""
    import gpualign.model.audit
    import gpualign.model.expect  # noqa: F401

    if setup.available is None or reads_registry(setup.available):
        import gpualign.judging.inspect
        import gpualign.judging.judge  # noqa: F401


def reads_registry(ledger: Ledger | RepoLedgers) -> bool:
    """Whether a ledger reads a registry (whose present images are then judged), not only files."""
    return any(sources.is_registry(s) for s in ledger.sources)


def check_cluster(read: Read, setup: Setup, streamed: Streamed | None = None) -> Checked:
    """One cluster's (or dump's) check, from what was read and the shared flags. streamed: its nodes already
    decided page by page as they were read (`stream`), from the same read."""
    with held_off():  # a finding and its report per node: thousands of small objects, none in a cycle
        if streamed is not None:
            if streamed.error is not None:  # the decider's, met early: raised now, after the read's notes were said
                raise streamed.error
            assert streamed.decider is not None
            try:
                return streamed.decider.finish(read, streamed.findings, streamed.absent, streamed.dicts,
                                               streamed.ahead)
            finally:
                if streamed.ahead is not None:
                    streamed.ahead.close()
        config = read.view.config if read.view else None
        return Decider(setup, config).finish(read)


@dataclass
class Streamed:
    """A cluster's nodes decided page by page while its LIST was read: the findings so far, and how; or why they
    could not be (no ledger, a registry the operator names that cannot be read), to be raised by check_cluster."""

    decider: Decider | None
    findings: list[Finding] = field(default_factory=list)
    absent: list[Finding] = field(default_factory=list)
    dicts: list[dict[str, Any]] = field(default_factory=list)  # each finding's report, made with it
    ahead: Ahead | None = None  # the present images' configs, read as the pages that need them came
    error: GpualignError | None = None


def stream(reading: Reading, setup: Setup) -> Streamed | None:
    """Decide each page of a cluster's GPU nodes as it arrives, while the next is on the wire: a 5,000-node check's
    audit then overlaps the API server's answer instead of following it. None when the read is not decided early
    (a dump: check_cluster then decides the whole read) or has failed (reading.result() raises why). The findings
    are those the whole read's audit makes: each node is decided from the same driver pods and operator objects,
    and the pages in name order are the whole fleet's."""
    # only a cluster's read streams; its readers (and the HTTP client) stay away from a dump's check
    from gpualign.kube.inventory import operator_config_of, planned_of

    so_far = reading.so_far()
    if so_far is None:
        return None
    pods, objects = so_far
    config = operator_config_of(objects, ())[0] if objects is not None else None
    try:
        decider = Decider(setup, config)
    except GpualignError as err:
        return Streamed(None, error=err)
    daemonsets = objects.daemonsets if objects is not None and config is not None else None
    findings: list[Finding] = []
    absent: list[Finding] = []
    dicts: list[dict[str, Any]] = []
    ahead = None
    if reads_registry(decider.ledger) and not setup.verify_modules:
        from gpualign.judging.judge import Ahead

        ahead = Ahead(setup.docker_config)
    archs: dict[str, set[str]] = {}  # a present image -> the CPU architectures of its nodes so far
    try:
        with held_off():
            for page in reading.pages():
                planned = None if config is None else planned_of(daemonsets, page) if daemonsets is not None else {}
                found, lacking = decider.decide(page, pods, planned, daemonsets is not None)
                findings += found
                absent += lacking
                dicts += [f.as_dict() for f in found]
                if ahead is not None:
                    for image, its in present_archs(found).items():
                        if not its <= archs.setdefault(image, set()):
                            archs[image] |= its
                            ahead.want(image, sorted(archs[image]))
    except BaseException:
        if ahead is not None:
            ahead.close()
        raise
    if reading.failed():  # result() raises its error: nothing will be judged
        if ahead is not None:
            ahead.close()
        return None
    return Streamed(decider, findings, absent, dicts, ahead)


class Decider:
    """How one cluster's nodes are decided: the rules for its operator's version, what each node should run (the
    flags, or the operator's objects) and the ledger to look in. Made before the nodes are read (it needs none of
    them), then asked page by page (`decide`) or once (`finish` alone)."""

    def __init__(self, setup: Setup, config: OperatorConfig | None) -> None:
        if not setup.ledger and config is None:
            raise CheckNoLedger("no ledger, and no GPU Operator ClusterPolicy names the repository")
        self.setup = setup
        self.rule_set, self.version_note = for_operator(
            setup.rules, setup.operator_version or (config.version if config else None))
        if setup.flags_given or config is None:
            self.expect = from_flags(setup.branches,
                                     repository=repository_for(setup.repository, setup.ledger, setup.warn),
                                     precompiled=setup.precompiled, driver_version=setup.driver_version,
                                     policy_file=setup.policy_given)
        else:
            self.expect = from_operator(config)
        self.ledger: sources.Ledger | sources.RepoLedgers
        if setup.available is None:
            assert config is not None
            with setup.repositories_lock:
                self.ledger = sources.load_repositories(
                    [s.repository for s in config.sources if s.repository and not s.problem],
                    docker_config=setup.docker_config, read=setup.repositories_read)
        else:
            self.ledger = setup.available
        self.derived: Derived = {}  # each distinct (kernel, OS, expectation)'s image, across pages

    def given(self, nodes: Iterable[NodeFacts], pods: Mapping[str, DriverPod] | None,
              planned: Mapping[str, tuple[str, str]] | None, daemonsets_read: bool) -> AuditInput:
        return AuditInput(nodes, self.ledger, self.rule_set, expect=self.expect, pods=pods, planned=planned,
                          daemonsets_read=daemonsets_read)

    def decide(self, nodes: Iterable[NodeFacts], pods: Mapping[str, DriverPod] | None,
               planned: Mapping[str, tuple[str, str]] | None,
               daemonsets_read: bool) -> tuple[list[Finding], list[Finding]]:
        """Some nodes' findings, and those of them whose image the ledger lacks (model.audit.findings_of)."""
        return findings_of(self.given(nodes, pods, planned, daemonsets_read), self.derived)

    def finish(self, read: Read, findings: list[Finding] | None = None, absent: list[Finding] | None = None,
               dicts: list[dict[str, Any]] | None = None, ahead: Ahead | None = None) -> Checked:
        """The check of the whole read: its nodes' findings (decided here when not given, with their dicts when
        made), the present images judged, and what to warn of."""
        setup, rule_set, ledger = self.setup, self.rule_set, self.ledger
        inv, view = read.inventory, read.view
        config = view.config if view else None
        notes = list(view.notes) if view else []  # what could not be read (RBAC, an unknown version)
        warnings: list[str] = [self.version_note] if self.version_note else []
        if config:
            warnings.extend(config.warnings)
            if not setup.flags_given:  # an unknown branch in the operator's objects warns as it does from a flag
                known = sorted(rule_set.published_branches | set(rule_set.branches) | rule_set.debian.branches,
                               key=int)
                for src in config.sources:
                    version = src.version or ""
                    if src.precompiled and version.isdigit() and version not in known:
                        warnings.append(f"{src.origin}: driver branch {version} is not one the rules know "
                                        f"({', '.join(known)}): every image for it counts as in-house")
        # the operator's DaemonSets read: what it made is known
        ds_read = bool(view and config and view.daemonsets_read)
        given = self.given(inv.nodes, inv.pods, view.planned if view and config else None, ds_read)
        if findings is None or absent is None:
            findings, absent, dicts = *self.decide(inv.nodes, inv.pods, given.planned, ds_read), None
        result = assemble(findings, absent)
        if dicts is not None:
            dicts.sort(key=itemgetter("name"))  # in the findings' order (assemble sorts them by name)
        if reads_registry(ledger):
            from gpualign.base import labels as L

            secure = frozenset(n.name for n in inv.nodes if n.labels.get(L.SECURE_BOOT) == "enabled")
            found = judge_present(result, setup.docker_config, warnings, setup.verify_modules, secure, ahead,
                                  setup.trusted)
            if found.wrong or found.unverified or found.verified or off_platform(result, found.platforms) or \
                    off_flavour(result, found.flavours):
                # the same audit, told what the images really are
                result = audit(dataclasses.replace(given, wrong=found.wrong, unverified=found.unverified,
                                                   verified=found.verified, platforms=found.platforms,
                                                   flavours=found.flavours))
                dicts = None  # other findings
        if (setup.flags_given or config is None) and \
                repository_for(setup.repository, setup.ledger, setup.warn) == NVIDIA_REPOSITORY and \
                any(action in (Maker.BUILD, Maker.RENDER) for _, _, _, action in result.missing_actions()):
            warnings.append("the images to build are named under nvcr.io/nvidia/driver, NVIDIA's registry, which you "
                            "cannot push to: pass --repository with your registry's repository (or a registry "
                            "ledger)")
        if config and not config.nvidiadriver_mode and not setup.flags_given:
            ostags = sorted({f.os_tag for f in result.findings if f.os_tag})
            if len(ostags) > 1:
                warnings.append(f"ClusterPolicy mode names every kernel's image with ONE OS tag, taken from whichever "
                                f"GPU node the operator lists first; this fleet has {', '.join(ostags)}: nodes of the "
                                "others get images built for another OS (use one NVIDIADriver per OS pool)")
        return Checked(audit=result, config=config, rules=rule_set, ledger_sources=tuple(ledger.sources), notes=notes,
                       warnings=warnings, node_dicts=dicts)


def off_platform(result: Audit, platforms: dict[str, tuple[str, ...]]) -> bool:
    """Whether a present image lacks the CPU architecture of a node that needs it."""
    return any(f.image in platforms and (f.arch or "amd64") not in platforms[f.image] for f in result.findings
               if f.image)


def off_flavour(result: Audit, flavours: dict[str, str]) -> bool:
    """Whether a present image holds modules of another flavour than a node that needs it loads."""
    return any(f.image in flavours and f.modules and flavours[f.image] != f.modules for f in result.findings
               if f.image)


def present_archs(findings: Iterable[Any]) -> dict[str, set[str]]:
    """Each present image -> the CPU architectures of the nodes that need it (amd64 when a node names none)."""
    archs: dict[str, set[str]] = {}
    for f in findings:
        if f.status == Status.PRESENT and f.image:
            archs.setdefault(f.image, set()).add(f.arch or "amd64")
    return archs


def judge_present(result: Any, docker_config: Path | None, warnings: list[str], modules: bool,
           secure_boot: frozenset[str] = frozenset(), ahead: Ahead | None = None,
           trusted: tuple[Any, ...] = ()) -> Judgement:
    """The present images, judged as the upgrade preflight judges them: their labels always; with `modules`, their
    kernel modules against the kernel of each node that needs them (a node whose kernel has no headers to judge
    against is left unverified, and says so). ahead: configs read while the nodes were."""
    # only a registry ledger's images are judged: the module check (pyelftools, cryptography) stays away otherwise
    from gpualign.judging.judge import OFF, STRICT, judge

    needs: dict[str, set[str | None]] = {}
    for f in result.findings:
        if f.status == Status.PRESENT and f.image:
            needs.setdefault(f.image, set()).add(f.kernel)
    secure = {f.image for f in result.findings if f.image and f.name in secure_boot} if secure_boot else set()
    found = judge(needs, docker_config=docker_config, modules=STRICT if modules else OFF, secure_boot=secure,
                  archs=present_archs(result.findings), ahead=ahead, trusted=trusted)
    warnings.extend(found.warnings)
    return found


