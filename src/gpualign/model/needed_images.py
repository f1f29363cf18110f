"""Before a kernel, OS or branch change: which images would be needed, and which of those the ledger lacks."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpualign.base import labels as L
from gpualign.model import debian_kernels
from gpualign.model.branches import BranchPolicy
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.expect import inferred_branch
from gpualign.model.facts import NodeFacts, node_facts
from gpualign.model.flavours import PROPRIETARY
from gpualign.model.flavours import resolve as resolve_flavour
from gpualign.model.kernels import debian_release, label_of, release_of
from gpualign.model.ledger import Ledger
from gpualign.model.makers import DebianTable, Maker, Making, who_makes
from gpualign.model.tags import RequiredImage, Rules, kernel_flavour, required_image


@dataclass(frozen=True)
class Change:
    kernel: str | None = None
    os_id: str | None = None
    os_version: str | None = None
    branch: str | None = None
    module_type: str | None = None  # kernelModuleType the pools will run with (None: each pool's own)
    # node -> its own next kernel (`plan --kernel next`: each pool's, as Debian's archive names it), in place of
    # `kernel`; a node not named (no next kernel known) is unknown with `unknown`'s reason
    kernels: tuple[tuple[str, str], ...] | None = None
    unknown: tuple[tuple[str, str], ...] = ()


_KERNEL_FAMILY = (("ubuntu", re.compile(r"\d+\.\d+\.\d+-\d+-[a-z][a-z0-9-]*")),
                  ("rhel", re.compile(r".*\.el\d+.*")),
                  ("amzn", re.compile(r".*\.amzn\d+.*")))
_OS_FAMILY = {"ubuntu": "ubuntu", "debian": "ubuntu", "rhel": "rhel", "rocky": "rhel", "centos": "rhel",
              "almalinux": "rhel", "ol": "rhel", "amzn": "amzn"}


def kernel_family(kernel: str) -> str | None:
    """Which distribution family names its kernels like this one (None: cannot tell)."""
    return next((family for family, pattern in _KERNEL_FAMILY if pattern.fullmatch(kernel)), None)


def misfit(kernel: str, os_id: str | None) -> str | None:
    """Why `kernel` cannot run on an OS with this ID (an Ubuntu kernel on RHEL), or None when it can or we cannot
    tell."""
    have, want = kernel_family(kernel), _OS_FAMILY.get(os_id or "")
    if have and want and have != want:
        return f"kernel {kernel} is a {have} kernel; this node's OS is {os_id}: plan each OS pool with -l"
    return None


# The kernel series each release installs (its GA kernel and the hardware-enablement ones; Ubuntu's kernel release
# cycle page; Debian: the stable kernel, bookworm-security's 6.12, and backports), so that a plan does not apply a
# kernel its OS never ships. A release not listed here is not checked.
_SHIPS = {("ubuntu", "20.04"): ("5.4", "5.8", "5.11", "5.13", "5.15"),
          ("ubuntu", "22.04"): ("5.15", "5.17", "5.19", "6.1", "6.2", "6.5", "6.8"),
          ("ubuntu", "24.04"): ("6.8", "6.11", "6.14", "6.17"),
          ("debian", "12"): ("6.1", "6.12"),
          ("debian", "13"): ("6.12",)}


def kernel_change_misfit(old: str | None, new: str, os_id: str | None, os_version: str | None) -> str | None:
    """Why a node that runs `old` on this OS cannot be planned on `new`, or None: a series its release does not
    ship, a Debian kernel of another release, or another Ubuntu flavour (aws, azure, gcp, generic are different
    kernels, each with its own ABI numbers: a plan never swaps one for another)."""
    major = (os_version or "").split(".")[0] if os_id == "debian" else os_version
    series = ".".join(new.split(".")[:2])
    ships = _SHIPS.get((os_id or "", major or ""))
    if os_id == "debian" and (release := debian_release(new)) is not None and release != major:
        return f"kernel {new} is built for Debian {release}; this node runs Debian {major}"
    if os_id == "debian" and (flavour := _debian_flavour_change(old, new)) is not None:
        return flavour
    if os_id == "debian" and ships and debian_kernels.parse(release_of(new)) is not None and \
            _series_key(series) > min(map(_series_key, ships)):
        return None  # a later line (backports'), its variant and its headers are who_makes' to judge, with why
    if ships is not None and series not in ships:
        return (f"{os_id} {os_version} does not ship kernel series {series} (it ships {', '.join(ships)}): "
                "plan each OS pool with -l")
    old_flavour, new_flavour = (kernel_flavour(old) if old else None), kernel_flavour(new)
    if os_id == "ubuntu" and old_flavour and new_flavour and old_flavour != new_flavour:
        return (f"kernel {new} is the {new_flavour} flavour; this node runs {old} ({old_flavour}): plan each "
                "flavour's nodes with -l and their own kernel")
    return None


def _series_key(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split(".") if x.isdigit())


def _debian_flavour_change(old: str | None, new: str) -> str | None:
    """Why a Debian node on `old` cannot be planned on `new`: another variant (cloud, rt, generic), architecture or
    page size is another kernel package, which apt never moves a node to."""
    was = debian_kernels.parse(release_of(old)) if old else None
    will = debian_kernels.parse(release_of(new))
    if was is None or will is None:
        return None
    if (was.variant, was.arch, was.pages) == (will.variant, will.arch, will.pages):
        return None
    return (f"kernel {new} is the {_flavour_name(will)} flavour; this node runs {old} ({_flavour_name(was)}): plan "
            "each flavour's nodes with -l and their own kernel")


def _flavour_name(kernel: debian_kernels.DebianKernel) -> str:
    return "-".join(p for p in (kernel.variant or "generic", kernel.arch, kernel.pages) if p)


_REACH = (Maker.NONE, Maker.RENDER, Maker.BUILD, Maker.MIRROR, Maker.PRESENT)  # who can do least, first


@dataclass(frozen=True)
class Needed:
    tag: str
    branch: str
    kernel: str
    os_tag: str
    published: bool
    in_ledger: bool
    nodes: tuple[str, ...]
    reason: str = ""  # the facts: why NVIDIA does or does not publish it
    wrong: str | None = None  # in the ledger under the tag, but present but wrong (why): to be made again
    archs: tuple[str, ...] = ("amd64",)  # the CPU architectures of the nodes that will need it
    modules: str = PROPRIETARY  # the kernel modules its nodes' driver pods will load (gpualign.model.flavours)
    debian: DebianTable = field(default=DebianTable(()), compare=False, repr=False)  # the rules' (who_makes)
    advice: str = ""  # the rules' generic advice, told only when NVIDIA publishes it (it is mirrored)

    @property
    def making(self) -> Making:
        """Who makes it (gpualign.model.makers): for nodes of several architectures, the one that can do least."""
        makings = [who_makes(self.os_tag, self.branch, self.kernel, arch, self.published, debian=self.debian,
                             flavour=self.modules) for arch in self.archs]
        return min(makings, key=lambda m: _REACH.index(m.maker))

    @property
    def told(self) -> str:
        """The reason a user reads: the facts, then who makes it (the same words check uses)."""
        making = self.making
        if making.maker is Maker.MIRROR:
            return self.reason + self.advice
        return f"{self.reason}; {making.why}"

    @property
    def action(self) -> str:
        """mirror, build, render or none (gpualign.model.makers)."""
        return str(self.making.maker)

    def build_args(self) -> dict[str, str]:
        return {"action": self.action, "DRIVER_BRANCH": self.branch, "KERNEL_VERSION": self.kernel,
                "OS_TAG": self.os_tag, "tag": self.tag, "modules": self.modules}


@dataclass(frozen=True)
class NeededImages:
    needed: tuple[Needed, ...]
    unknown: tuple[tuple[str, str], ...]  # (node, reason)

    @property
    def to_build(self) -> tuple[Needed, ...]:
        return tuple(n for n in self.needed if not n.in_ledger)

    def as_dict(self) -> dict[str, Any]:
        return {"needed": [{**{k: v for k, v in dataclasses.asdict(n).items() if k not in ("debian", "advice")},
                            "reason": n.told, "action": n.action, "action_reason": n.making.why,
                            "action_kind": str(n.making.reason)}
                           for n in self.needed],
                "to_build": [n.tag for n in self.to_build if n.action != Maker.NONE],
                "cannot_make": [{"tag": n.tag, "reason": n.making.why, "kind": str(n.making.reason)}
                                for n in self.to_build if n.action == Maker.NONE],
                "modules": {n.tag: n.modules for n in self.to_build},
                "unknown": [{"node": n, "reason": r} for n, r in self.unknown]}


def images_needed(nodes: Iterable[NodeFacts], change: Change, ledger: Ledger, rules: Rules, branches: BranchPolicy,
         wrong: Mapping[str, str] | None = None, *, pods: Mapping[str, DriverPod] | None = None) -> NeededImages:
    """Each node as it will be after `change`; the ledger answers for the repository the images go to.
    wrong: tag -> why the image under it is present but wrong (it counts as work to do, like a missing one).
    pods: the driver pods, where read: a node no branch is named for keeps its pod's, as check infers it."""
    wrong = wrong or {}
    groups: dict[str, list[str]] = {}
    archs: dict[str, set[str]] = {}
    info: dict[str, RequiredImage] = {}  # tag -> what a node that needs it requires (the last one read)
    flavours: dict[str, str] = {}
    unknown: list[tuple[str, str]] = []
    why_unknown = dict(change.unknown)
    per_node = dict(change.kernels) if change.kernels is not None else None
    for facts in sorted(nodes, key=lambda n: n.name):
        # The node as it will be: its labels with the change applied, read by the same code as today's.
        labels = dict(facts.labels)
        new_kernel = change.kernel if per_node is None else per_node.get(facts.name)
        if per_node is not None and new_kernel is None:
            unknown.append((facts.name, why_unknown.get(facts.name, "no next kernel known for it")))
            continue
        if new_kernel:
            labels[L.KERNEL] = label_of(new_kernel)  # as NFD will label it (a release's `+` as `_`)
        if change.os_id and change.os_version:
            labels[L.OS_ID], labels[L.OS_VERSION] = change.os_id, change.os_version
        for key in (L.DRIVER_CURRENT_FULL, *L.DRIVER_CURRENT.values(), *L.DRIVER_LEGACY.values()):
            labels.pop(key, None)  # the loaded driver is about to change: its labels say nothing of the new image
        changed = node_facts({"metadata": {"name": facts.name, "labels": labels}})
        unfit = misfit(changed.kernel, changed.os_id) if changed.kernel else None
        if not unfit and new_kernel:
            unfit = kernel_change_misfit(facts.kernel, new_kernel, changed.os_id, changed.os_version)
        if unfit:
            unknown.append((facts.name, unfit))
            continue
        rule = branches.rule_for(facts.labels)
        branch = change.branch or (rule.branch if rule else branches.default) or \
            inferred_branch(facts, pods.get(facts.name) if pods else None)
        precompiled = rule.precompiled if rule and rule.precompiled is not None else True
        req = required_image(changed, branch, rules, precompiled=precompiled)
        if req.tag is None:
            unknown.append((facts.name, req.reason))
            continue
        groups.setdefault(req.tag, []).append(facts.name)
        archs.setdefault(req.tag, set()).add(facts.arch)
        module_type = change.module_type or branches.module_type_of(rule)
        flavours.setdefault(req.tag, resolve_flavour(module_type, req.branch))
        info[req.tag] = req
    needed = tuple(Needed(tag=tag, branch=info[tag].branch or "", kernel=info[tag].kernel or "",
                          os_tag=info[tag].os_tag or "", published=info[tag].published,
                          in_ledger=ledger.has(tag) and tag not in wrong, nodes=tuple(names),
                          reason=info[tag].reason, wrong=wrong.get(tag) if ledger.has(tag) else None,
                          archs=tuple(sorted(archs[tag])), modules=flavours[tag], debian=rules.debian,
                          advice=info[tag].advice)
                   for tag, names in sorted(groups.items()))
    return NeededImages(needed, tuple(unknown))
