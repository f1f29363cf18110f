"""Required images against the ledger and the driver pods actually running → one finding per GPU node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property, lru_cache
from operator import attrgetter
from typing import Any

from gpualign.base import labels as L
from gpualign.model.branches import BranchPolicy
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.expect import Expectation, Resolver, from_flags
from gpualign.model.facts import NodeFacts
from gpualign.model.flavours import PROPRIETARY
from gpualign.model.flavours import mismatch as flavour_mismatch
from gpualign.model.flavours import resolve as resolve_flavour
from gpualign.model.ledger import Ledger, RepoLedgers, Unsigned
from gpualign.model.makers import Maker, Making, who_makes
from gpualign.model.node_status import Status
from gpualign.model.platforms import platform_problem
from gpualign.model.tags import RequiredImage, Rules, os_tag, required_image
from gpualign.model.version import DriverVersion

__all__ = ["DriverPod", "Audit", "AuditInput", "Finding", "Status", "audit"]


@dataclass
class Finding:
    """One GPU node's finding. Not frozen, though nothing changes one once made: a frozen dataclass's __init__ sets
    each of these 19 fields through object.__setattr__, 14 ms for 5,000 nodes against 2 ms, a check's largest
    per-node cost."""

    name: str
    kernel: str | None
    os_tag: str | None
    branch: str | None
    tag: str | None
    image: str | None
    status: Status
    published: bool
    reason: str
    driver: str | None = None
    driver_pod: DriverPod | None = None
    pod_matches_kernel: bool | None = None
    source: str | None = None  # where the expectation came from: clusterpolicy/NAME, nvidiadriver/NAME, flags, …
    operator_image: str | None = None  # the image the operator deployed here (its pod), else would deploy (its DS)
    verified: bool | None = None  # modules checked against its kernel: True passed, False could not be; None: unasked
    arch: str | None = None  # the node's CPU architecture (kubernetes.io/arch)
    making: Making | None = None  # who makes the image when it is not present (gpualign.model.makers)
    modules: str | None = None  # the kernel modules its driver pod loads: proprietary or open (gpualign.model.flavours)
    module_type: str | None = None  # what the pod is given to decide that: kernelModuleType (auto, open, proprietary)
    wrong: str | None = None  # why the image under its tag is present but wrong (WRONG_IMAGE); the reason says so too

    @property
    def driver_pod_failing(self) -> bool:
        return self.driver_pod is not None and self.driver_pod.failing

    @property
    def action(self) -> str | None:
        """Who makes the image (gpualign.model.makers): mirror, build, render or none."""
        if self.tag is None:
            return None
        return str(self.making.maker) if self.making else str(Maker.MIRROR if self.published else Maker.BUILD)

    @property
    def to_do(self) -> str | None:
        """What is to be done for its image, as reports name it: who makes a missing one (`action`), `replace` for
        a wrong one, None when nothing is."""
        if self.status in (Status.MISSING, Status.OPERATOR_MISMATCH):
            return self.action
        return "replace" if self.status == Status.WRONG_IMAGE else None

    @property
    def why_not_made(self) -> str | None:
        """Why its missing image is made as `to_do` says (render, none: why gpualign cannot make it)."""
        return self.making.why if self.making and self.status in (Status.MISSING, Status.OPERATOR_MISMATCH) \
            else None

    def as_dict(self) -> dict[str, Any]:
        # The instance's own fields, in their order (one C-level copy): dataclasses.asdict's deep copy was a quarter
        # of a 5,000-node check, and a per-call dataclasses.fields() most of what remained.
        d = dict(self.__dict__)
        del d["making"]
        del d["wrong"]  # the reason carries it, for people; wrong_images() lists it per image
        d["driver_pod"] = self.driver_pod.as_dict() if self.driver_pod else None
        d["action"] = self.to_do
        d["action_reason"] = self.why_not_made
        d["driver_pod_failing"] = self.driver_pod_failing
        return d


@dataclass(frozen=True)
class Audit:
    findings: tuple[Finding, ...]
    missing: tuple[tuple[str, str, tuple[str, ...]], ...]  # (tag, image, nodes)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, int]:
        return dict(self._summary)

    @cached_property
    def _summary(self) -> dict[str, int]:  # counted once: the report and the exit code both ask
        count = Counter(f.status for f in self.findings)  # one pass, not one per status
        kernel_mismatch = failing = unverified = unsigned = 0
        for f in self.findings:
            if f.status == Status.WRONG_IMAGE and isinstance(f.wrong, Unsigned):
                unsigned += 1
            if f.pod_matches_kernel is False:
                kernel_mismatch += 1
            if f.driver_pod is not None and f.driver_pod.failing:
                failing += 1
            if f.verified is False:
                unverified += 1
        return {"gpu_nodes": len(self.findings), "present": count[Status.PRESENT], "missing": count[Status.MISSING],
                "unknown": count[Status.UNKNOWN], "host_managed": count[Status.HOST_MANAGED],
                "operator_mismatch": count[Status.OPERATOR_MISMATCH],
                "wrong_image": count[Status.WRONG_IMAGE], "missing_images": len(self.missing),
                "pod_kernel_mismatch": kernel_mismatch, "driver_pod_failing": failing, "unverified": unverified,
                "unsigned": unsigned}  # of wrong_image: present, but no trusted key signed it

    @property
    def clean(self) -> bool:
        s = self.summary()
        return s["missing"] == 0 and s["unknown"] == 0 and s["pod_kernel_mismatch"] == 0 \
            and s["operator_mismatch"] == 0 and s["wrong_image"] == 0 and s["driver_pod_failing"] == 0

    def missing_actions(self) -> list[tuple[str, str, tuple[str, ...], str]]:
        """(tag, image, nodes, action) for each missing image: who makes it (gpualign.model.makers), as its first node's
        finding says."""
        action = {}
        for f in self.findings:
            if f.image and f.image not in action:
                action[f.image] = f.action or ""
        return [(t, i, n, action.get(i, "")) for t, i, n in self.missing]

    def modules_of(self, image: str) -> str | None:
        """The kernel modules the driver pods of an image's nodes load (its first node's: one image holds one
        flavour)."""
        return next((f.modules for f in self.findings if f.image == image and f.modules), None)

    def as_dict(self, nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The report's body. nodes: the findings' own dicts, in the findings' order, when already made (a check
        makes each page's while the next is read)."""
        return {"nodes": [f.as_dict() for f in self.findings] if nodes is None else nodes,
                "missing": [{"tag": t, "image": i, "nodes": list(n), "action": a, "modules": self.modules_of(i)}
                            for t, i, n, a in self.missing_actions()],
                "wrong": self.wrong_images(),
                "summary": self.summary()}

    def wrong_images(self) -> list[dict[str, Any]]:
        """Each image present but wrong, once, with its nodes and why: `gpualign ensure --replace-wrong` repairs it."""
        out: dict[str, dict[str, Any]] = {}
        for f in self.findings:
            if f.status == Status.WRONG_IMAGE and f.image:
                entry = out.setdefault(f.image, {"tag": f.tag, "image": f.image, "nodes": [], "action": "replace",
                                                 "why": f.wrong,
                                                 "modules": f.modules})
                entry["nodes"].append(f.name)
        return [out[i] for i in sorted(out)]


def _advice(req: RequiredImage, making: Making | None) -> str:
    """The rules' reason, with who makes the image in place of their generic advice."""
    if making is None or making.maker is Maker.MIRROR:
        return req.told
    return f"{req.reason}; {making.why}"


@lru_cache(maxsize=256)
def _text(version: DriverVersion) -> str:
    return str(version)


def _built_for(image: str, kernel: str | None, ostag: str | None, precompiled: bool) -> bool:
    """Whether an image's tag names this node's kernel (precompiled) and OS tag: a version difference is an upgrade
    in waiting, not a mismatch."""
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    suffix = f"-{kernel}-{ostag}" if precompiled else f"-{ostag}"
    return tag.endswith(suffix)


@dataclass(frozen=True)
class AuditInput:
    """What the audit decides from. nodes, ledger (one, or one per image repository) and rules; what each node should
    run: `expect`, else the flags given as branches, repository, precompiled and driver_version. Then what was read:
    - pods: driver pod per node name when a cluster was read (None for a nodes dump: pods unknown);
    - planned: node -> (DaemonSet, image) the operator would deploy, given when the operator's configuration was
      read (operator_image and the mismatch check then apply); daemonsets_read: the operator's driver DaemonSets
      were read, so a node none of them selects (and with no driver pod) is one the operator made nothing for;
    - of the images (judging.judge): wrong, image -> why it is present but wrong (its labels, or its modules, name
      another kernel or branch); unverified / verified, images whose modules were to be checked and could not be
      (why) / passed (symbols); platforms, image -> the linux CPU architectures it holds (a node of another one is
      wrong-image); flavours, image -> the flavour of kernel modules it holds (a node whose driver pod loads the
      other flavour is wrong-image)."""

    nodes: Iterable[NodeFacts]
    ledger: Ledger | RepoLedgers
    rules: Rules
    branches: BranchPolicy | None = None
    _: KW_ONLY
    repository: str | None = None
    precompiled: bool = True
    driver_version: str | None = None
    expect: Resolver | None = None
    pods: Mapping[str, DriverPod] | None = None
    planned: Mapping[str, tuple[str, str]] | None = None
    daemonsets_read: bool = False
    wrong: Mapping[str, str] | None = None
    unverified: Mapping[str, str] | None = None
    verified: Mapping[str, int] | None = None
    platforms: Mapping[str, tuple[str, ...]] | None = None
    flavours: Mapping[str, str] | None = None


def audit(given: AuditInput) -> Audit:
    """Each GPU node's finding: the image it needs, whether the ledger holds it, and why (AuditInput)."""
    return assemble(*findings_of(given))


Derived = dict[tuple[Any, ...], tuple[RequiredImage, str | None, bool, str | None, Making | None]]
ONE_OS_TAG = ("; ClusterPolicy mode takes one node's OS tag for every kernel: use NVIDIADriver objects per OS "
              "pool")
NO_DAEMONSET = ("; the GPU Operator made no driver DaemonSet for this node, so no driver pod starts here whatever the "
                "ledger holds (its log names the node pool it could not render): run the driver on the host (label "
                "the node nvidia.com/gpu.deploy.driver=false) or move the node to an OS and kernel the operator "
                "serves")


def findings_of(given: AuditInput, derived: Derived | None = None) -> tuple[list[Finding], list[Finding]]:
    """The findings of `given.nodes`, in name order, and those of them whose image the ledger lacks (the missing
    images' nodes). Nodes are independent of each other: a fleet read page by page is decided page by page, and
    `assemble` makes one audit of the pages' findings. derived: each distinct (kernel, OS, expectation)'s image,
    kept across the calls of one audit (a fleet has few).

    Each node in steps: host-managed, or its image derived (once per distinct kernel, OS and expectation), judged
    against the ledger (present, wrong, missing), against the GPU Operator's own choice (a mismatch), and told with
    what its driver pod shows."""
    pods = given.pods
    resolve = given.expect or from_flags(given.branches or BranchPolicy(), repository=given.repository,
                                         precompiled=given.precompiled, driver_version=given.driver_version)
    findings: list[Finding] = []
    absent: list[Finding] = []  # nodes whose needed image is not in the ledger (missing, or behind a mismatch)
    # A fleet has few distinct (kernel, OS, expectation) triples: each one's image is derived, and looked up in its
    # ledger, once. The cached RequiredImage names the first node it was derived for; only its image parts are read.
    derived = {} if derived is None else derived
    for facts in sorted((n for n in nodes_with_gpus(given.nodes)), key=lambda n: n.name):
        pod = pods.get(facts.name) if pods is not None else None
        driver = _text(facts.driver) if facts.driver else None
        exp: Expectation = resolve(facts, pod)
        if facts.host_driver or exp.host_managed or \
                (pods is not None and pod is None and facts.labels.get(L.DEPLOY_DRIVER) != "true"):
            findings.append(_host_managed(facts, exp, given.rules, driver))
            continue
        key = (facts.kernel, facts.os_id, facts.os_version, facts.problems, exp, facts.arch)
        if key not in derived:
            derived[key] = _derive(facts, exp, given)
        req, image, in_ledger, modules, making = derived[key]
        why_wrong = _why_wrong(given, image, in_ledger, exp, req, making, facts.arch)
        status, reason = _against_ledger(given, facts, req, image, in_ledger, making, why_wrong)
        matches = None
        if pod is not None and facts.kernel:
            matches = f"-{facts.kernel}-" in f"-{pod.tag}-" or not exp.precompiled
            if not matches:
                reason += f"; driver pod {pod.name} runs {pod.tag or pod.image}, built for another kernel"
        operator_image = None
        if given.planned is not None:
            status, reason, operator_image = _against_operator(given.planned, facts, pod, req, image, in_ledger,
                                                                exp, status, reason)
            if given.daemonsets_read and pods is not None and pod is None and facts.name not in given.planned \
                    and req.tag:
                reason += NO_DAEMONSET
        if pod is not None and pod.failing and status not in (Status.MISSING, Status.OPERATOR_MISMATCH):
            reason += f"; but {pod.trouble()}"
            if status == Status.PRESENT and image and pod.waits_for(image):
                reason += f"; {pod.restart_hint()}"
        finding = Finding(
            name=facts.name, kernel=facts.kernel, os_tag=req.os_tag, branch=req.branch, tag=req.tag, image=image,
            status=status, published=req.published, reason=reason, driver=driver, driver_pod=pod,
            pod_matches_kernel=matches, source=exp.origin, operator_image=operator_image,
            verified=_checked(given, status, image), arch=facts.arch, making=making, modules=modules,
            module_type=exp.module_type if req.tag else None,
            wrong=why_wrong if status == Status.WRONG_IMAGE else None)
        findings.append(finding)
        if image and not in_ledger and status in (Status.MISSING, Status.OPERATOR_MISMATCH):
            absent.append(finding)
    return findings, absent


def nodes_with_gpus(nodes: Iterable[NodeFacts]) -> Iterator[NodeFacts]:
    return (n for n in nodes if n.gpu)


def _host_managed(facts: NodeFacts, exp: Expectation, rules: Rules, driver: str | None) -> Finding:
    """A node whose driver the host installs: no image to judge, and said why."""
    why = exp.host_managed or ("the GPU Operator's driver-deploy label is false" if facts.host_driver
                               else "no driver pod")
    host_os = os_tag(facts.os_id, facts.os_version, rules) if facts.os_id and facts.os_version else None
    return Finding(name=facts.name, kernel=facts.kernel, os_tag=host_os, branch=None, tag=None, image=None,
                   status=Status.HOST_MANAGED, published=False,
                   reason=f"driver installed on the host ({why}; driver {driver or 'unknown'}): version management "
                          "there rests with the team", driver=driver, driver_pod=None, source=exp.origin,
                   arch=facts.arch)


def _derive(facts: NodeFacts, exp: Expectation, given: AuditInput
            ) -> tuple[RequiredImage, str | None, bool, str | None, Making | None]:
    """The image a (kernel, OS, expectation) needs, whether its ledger has it, its modules' flavour and who makes
    it: once per distinct triple."""
    rules = given.rules
    if exp.problem:
        req = RequiredImage(node=facts.name, tag=None, os_tag=None, kernel=facts.kernel, branch=exp.branch,
                            published=False, reason=exp.problem)
    else:
        req = required_image(facts, exp.branch, rules, precompiled=exp.precompiled, driver_version=exp.driver_version)
    image = f"{exp.repository}:{req.tag}" if req.tag and exp.repository else None
    modules = resolve_flavour(exp.module_type, req.branch) if req.tag else None
    making = who_makes(req.os_tag or "", req.branch or "", req.kernel or "", facts.arch, req.published,
                       debian=rules.debian, precompiled=exp.precompiled, flavour=modules or PROPRIETARY) \
        if req.tag else None
    in_ledger = bool(req.tag and image and given.ledger.for_repository(exp.repository or "").has(req.tag))
    return req, image, in_ledger, modules, making


def _why_wrong(given: AuditInput, image: str | None, in_ledger: bool, exp: Expectation, req: RequiredImage,
               making: Making | None, arch: str) -> str | None:
    """Why a present image is not what its tag says: judged wrong, for another platform, or another flavour."""
    if not in_ledger or image is None:
        return None
    if given.wrong and image in given.wrong:
        return given.wrong[image]
    off_platform = platform_problem(image, arch, given.platforms) if given.platforms else None
    off_flavour = flavour_mismatch(given.flavours.get(image), exp.module_type, req.branch,
                                   making.why if making and making.maker is Maker.NONE else None) \
        if given.flavours else None
    return off_platform or off_flavour or None


def _against_ledger(given: AuditInput, facts: NodeFacts, req: RequiredImage, image: str | None, in_ledger: bool,
                    making: Making | None, why_wrong: str | None) -> tuple[Status, str]:
    """unknown, wrong, present (with what its modules' check said) or missing (with who makes it)."""
    if req.tag is None or image is None:
        return Status.UNKNOWN, req.reason
    if why_wrong is not None:
        return Status.WRONG_IMAGE, f"present but wrong: {why_wrong}"
    if not in_ledger:
        return Status.MISSING, f"missing from the ledger; {_advice(req, making)}"
    reason = "in the ledger; " + req.reason  # the advice (mirror it / build it) is for a missing image
    if given.unverified and image in given.unverified:
        reason += f"; modules not verified: {given.unverified[image]}"
    elif given.verified and image in given.verified:
        reason += f"; modules verified ({given.verified[image]} symbol CRCs match kernel {facts.kernel})"
    return Status.PRESENT, reason


def _against_operator(planned: Mapping[str, tuple[str, str]], facts: NodeFacts, pod: DriverPod | None,
                      req: RequiredImage, image: str | None, in_ledger: bool, exp: Expectation, status: Status,
                      reason: str) -> tuple[Status, str, str | None]:
    """Beside the GPU Operator: the image it runs (or would deploy) against the one the node needs; a mismatch now,
    or latent in its DaemonSet (the next restart deploys it)."""
    plan = planned.get(facts.name)
    operator_image = pod.image if pod is not None else (plan[1] if plan else None)
    one_os = ONE_OS_TAG if exp.one_os_tag else ""
    if image and operator_image and not _built_for(operator_image, facts.kernel, req.os_tag, exp.precompiled):
        return Status.OPERATOR_MISMATCH, (
            f"the operator {'runs' if pod is not None else 'would deploy'} {operator_image} here, but this node "
            f"({req.os_tag}, kernel {facts.kernel}) needs {image}{one_os}"
            + ("" if in_ledger else f"; {req.tag} is also missing from the ledger")), operator_image
    if image and pod is not None and plan and plan[1] and \
            not _built_for(plan[1], facts.kernel, req.os_tag, exp.precompiled):
        # latent: the running pod is right, the next restart deploys the wrong image
        return Status.OPERATOR_MISMATCH, (
            f"its DaemonSet {plan[0]} now names {plan[1]}, built for another OS or kernel: the next driver restart "
            f"deploys that here, but this node ({req.os_tag}, kernel {facts.kernel}) needs {image}{one_os}; "
            f"{reason}"), operator_image
    return status, reason, operator_image


def _checked(given: AuditInput, status: Status, image: str | None) -> bool | None:
    """A present image's modules: checked and passed (True), could not be checked (False), not asked (None)."""
    if status != Status.PRESENT or not image or not (given.unverified or given.verified):
        return None
    if given.unverified and image in given.unverified:
        return False
    return True if given.verified and image in given.verified else None


def assemble(findings: list[Finding], absent: list[Finding]) -> Audit:
    """One audit of findings (findings_of's, of one call or of several concatenated): in name order, and each missing
    image once with its nodes."""
    by_name = attrgetter("name")
    findings.sort(key=by_name)  # pages of a LIST come in name order: a pass that moves nothing
    absent.sort(key=by_name)
    groups: dict[str, tuple[str, list[str]]] = {}
    for f in absent:
        groups.setdefault(f.image or "", (f.tag or "", []))[1].append(f.name)
    missing = tuple((t, i, tuple(n)) for i, (t, n) in sorted(groups.items()))
    return Audit(tuple(findings), missing)
