"""NodeFacts + branch + rules → the driver image tag the node needs, and whether NVIDIA publishes it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.model.facts import NodeFacts
from gpualign.model.makers import DebianTable

_UBUNTU_KERNEL = re.compile(r"(\d+)\.(\d+)\.\d+-\d+-([a-z][a-z0-9-]*)")
_BRANCH = re.compile(r"[0-9]{3,4}")


@dataclass(frozen=True)
class Rules:
    """The versioned naming rules (rules/driver_images.yaml, optionally overridden by --rules FILE)."""

    major_version_only: frozenset[str]
    flavours: frozenset[str]
    kernels: Mapping[str, tuple[str, ...]]
    published_branches: frozenset[str]
    branches: Mapping[str, str]
    default_branch: str
    source: str = field(default="built-in", compare=False)
    eras: tuple[OsTagEra, ...] = field(default=(), compare=False)
    operator_version: str | None = field(default=None, compare=False)  # whose OS-tag rules these are, if chosen
    matrix_version: str = field(default="?", compare=False)  # the operator release NVIDIA's matrix is taken from
    debian: DebianTable = field(default=DebianTable(()), compare=False)  # the Debian releases gpualign builds

    def describe(self) -> str:
        """Where a 'published' verdict comes from, for reasons a user reads."""
        where = "the built-in rules" if self.source == "built-in" else f"rules {self.source}"
        return f"{where}, NVIDIA's matrix as of GPU Operator {self.matrix_version}"


@dataclass(frozen=True)
class OsTagEra:
    """How the operator named OS tags from one version (or main-branch commit date) on."""

    since: tuple[int, int, int] | None
    since_main: str  # YYYY-MM-DD
    major_version_only: frozenset[str]


_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_PSEUDO = re.compile(r"v\d+\.\d+\.\d+-(?:0\.)?(\d{4})(\d{2})(\d{2})\d{6}-[0-9a-f]{12}")


def eras_from(raw: Any) -> tuple[OsTagEra, ...]:
    eras = []
    for item in raw or []:
        m = _RELEASE.fullmatch(str(item["since"])) if item.get("since") else None
        eras.append(OsTagEra(tuple(int(x) for x in m.groups()) if m else None,  # type: ignore[arg-type]
                             str(item["since_main"]), frozenset(str(x) for x in item["major_version_only"])))
    return tuple(eras)


def for_operator(rules: Rules, version: str | None) -> tuple[Rules, str | None]:
    """The rules as the given operator version names OS tags, and a note when the version cannot be placed
    (the newest rules then apply). A release (v25.10.1) or a main pseudo-version (v0.0.0-20250917190837-d73a…)."""
    if not version or not rules.eras:
        return rules, None
    pseudo = _PSEUDO.fullmatch(version)
    release = _RELEASE.fullmatch(version)
    era = None
    if pseudo:
        date = "-".join(pseudo.groups())
        era = next((e for e in rules.eras if e.since_main <= date), None)
    elif release:
        number = tuple(int(x) for x in release.groups())
        era = next((e for e in rules.eras if e.since is not None and e.since <= number), None)
    if era is None:
        return rules, (f"operator version {version!r} is neither a release (vX.Y.Z) nor a Go pseudo-version: "
                       "OS tags follow the newest rules")
    return replace(rules, major_version_only=era.major_version_only, operator_version=version), None


_OS_NAMED = re.compile(r"([a-z]+)-?(\d+(?:\.\d+)*)")


def parse_os(value: str | None) -> tuple[str, str] | None:
    """An OS named as os-release's ID and VERSION_ID, as `plan --os` and gpualign.io/os.next take it: debian13 or
    debian-13 → (debian, 13); ubuntu24.04 → (ubuntu, 24.04). None when absent or not of that shape."""
    m = _OS_NAMED.fullmatch(value or "")
    return (m.group(1), m.group(2)) if m else None


def os_tag(os_id: str, version_id: str, rules: Rules) -> str:
    """ubuntu + 22.04 → ubuntu22.04; rhel + 9.4 → rhel9 (major only for the IDs the rules name; "rhel>=10" only
    from major 10 on)."""
    major = version_id.split(".", 1)[0]
    for entry in rules.major_version_only:
        name, _, floor = entry.partition(">=")
        if name == os_id and (not floor or (major.isdigit() and int(major) >= int(floor))):
            return f"{os_id}{major}"
    return f"{os_id}{version_id}"


def kernel_flavour(kernel: str) -> str | None:
    """5.15.0-69-generic → generic; 6.8.0-1017-azure-fde → azure-fde; RHEL-style kernels → None."""
    m = _UBUNTU_KERNEL.fullmatch(kernel)
    return m.group(3) if m else None


def sanitize_kernel(kernel: str) -> str:
    """The operator's form for object names and labels: 5.14.0-427.37.1.el9_4.x86_64 → 5.14.0-427.37.1.el9.4."""
    k = re.sub(r"[._](x86_64|aarch64)(_64k)?$", "", kernel)
    return k.replace("_", ".").lower()


def normalize_branch(text: str) -> str:
    """'580' or '580.95.05' → '580'. Digests and other shapes are refused."""
    text = text.strip()
    if "@" in text or text.startswith("sha256:"):
        raise BadInput(f"driver branch {text!r}: a digest is not a branch; give the major number, e.g. 580")
    head = text.split(".", 1)[0]
    if not _BRANCH.fullmatch(head):
        raise BadInput(f"driver branch {text!r}: expected a major driver number such as 580")
    return head


def published(branch: str, kernel: str, ostag: str, rules: Rules) -> bool:
    """Whether the rules say NVIDIA publishes this precompiled tag (required_image's verdict, from a tag's parts)."""
    flavour = kernel_flavour(kernel)
    series = ".".join(kernel.split(".")[:2])
    return ostag in rules.kernels and flavour is not None and flavour in rules.flavours and \
        series in rules.kernels[ostag] and branch in rules.published_branches


@dataclass(frozen=True)
class RequiredImage:
    """The image one node needs. `tag` is None when the labels do not allow deriving one."""

    node: str
    tag: str | None
    os_tag: str | None
    kernel: str | None
    branch: str | None
    published: bool
    reason: str  # the facts: why it is or is not published
    advice: str = ""  # the rules' generic advice on making it (": build it in-house"), said after the facts

    @property
    def told(self) -> str:
        """The facts with the rules' advice, as told for a missing image nobody else makes."""
        return self.reason + self.advice


def required_image(facts: NodeFacts, branch: str | None, rules: Rules, *, precompiled: bool = True,
                   driver_version: str | None = None) -> RequiredImage:
    """Total: any facts give a RequiredImage; problems become the reason, never an exception."""
    ostag = os_tag(facts.os_id, facts.os_version, rules) if facts.os_id and facts.os_version else None
    if facts.problems:
        return RequiredImage(node=facts.name, tag=None, os_tag=ostag, kernel=facts.kernel, branch=branch,
                             published=False, reason="; ".join(facts.problems))
    if not branch:
        return RequiredImage(node=facts.name, tag=None, os_tag=ostag, kernel=facts.kernel, branch=None,
                             published=False, reason="no driver branch: pass --driver-branch or a --branch-policy "
                                                     "that selects this node")
    assert ostag is not None and facts.kernel is not None
    if precompiled:
        tag = f"{branch}-{facts.kernel}-{ostag}"
        flavour = kernel_flavour(facts.kernel)
        series = ".".join(facts.kernel.split(".")[:2])
        if ostag not in rules.kernels:  # the OS first: NVIDIA publishes nothing precompiled for it at all
            return RequiredImage(node=facts.name, tag=tag, os_tag=ostag, kernel=facts.kernel, branch=branch,
                                 published=False,
                                 reason=f"NVIDIA publishes no precompiled images for {ostag}",
                                 advice=": build it in-house")
        if flavour is None or flavour not in rules.flavours:
            why = f"kernel flavour {flavour!r} is" if flavour else "this kernel's flavour is"
            return RequiredImage(node=facts.name, tag=tag, os_tag=ostag, kernel=facts.kernel, branch=branch,
                                 published=False,
                                 reason=f"{why} not published precompiled by NVIDIA", advice=": build it in-house")
        if series not in rules.kernels[ostag]:
            return RequiredImage(node=facts.name, tag=tag, os_tag=ostag, kernel=facts.kernel, branch=branch,
                                 published=False,
                                 reason=f"kernel series {series} is not in NVIDIA's {ostag} matrix",
                                 advice=": build it in-house")
        if branch not in rules.published_branches:
            return RequiredImage(node=facts.name, tag=tag, os_tag=ostag, kernel=facts.kernel, branch=branch,
                                 published=False,
                                 reason=f"branch {branch} is not published precompiled", advice=": build it in-house")
        return RequiredImage(node=facts.name, tag=tag, os_tag=ostag, kernel=facts.kernel, branch=branch, published=True,
                             reason=f"NVIDIA publishes {ostag} kernel series {series}, branch {branch} precompiled "
                             f"({rules.describe()})", advice=": mirror it, after checking the tag on NGC")
    version = driver_version or rules.branches.get(branch)
    if not version:
        return RequiredImage(node=facts.name, tag=None, os_tag=ostag, kernel=facts.kernel, branch=branch,
                             published=False,
                             reason=f"no full driver version known for branch {branch}: pass --driver-version")
    return RequiredImage(node=facts.name, tag=f"{version}-{ostag}", os_tag=ostag, kernel=facts.kernel, branch=branch,
                         published=True,
                         reason="regular (non-precompiled) driver image")
