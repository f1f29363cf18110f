"""The GPU Operator's own configuration, read as the operator reads it: a ClusterPolicy and NVIDIADriver objects →
which driver source governs each GPU node. Pure: objects in, sources out.

Sources (github.com/NVIDIA/gpu-operator at the lab's pin, and unchanged in v26.7.0 where it matters):
- ClusterPolicy: controllers/object_controls.go resolveDriverTag (precompiled: REPOSITORY/IMAGE:VERSION-KERNEL-OSTAG;
  kbld style: IMAGE-KERNEL-OSTAG when repository and version are empty), internal/image/image.go ImagePath
  (regular: REPOSITORY/IMAGE:VERSION-OSTAG, or @digest as is). It takes ONE OS tag, from the first GPU node its cache
  lists, for every kernel (kernelFullVersion): mixed-OS fleets get wrong tags.
- spec.driver.useNvidiaDriverCRD: true hands the driver to NVIDIADriver objects (api/nvidia/v1alpha1): each selects
  nodes by spec.nodeSelector (default nvidia.com/gpu.present=true) and names images per OS+kernel pool
  (internal/state/nodepool.go), so mixed OS is right there. Two objects selecting one node are refused by the
  operator (internal/validator: ConflictingNodeSelector).
- v26 (api/nvidia/v1alpha1/nvidiadriver_types.go, controllers/nodelabeling_controller.go, upgrade_controller.go):
  an NVIDIADriver with `spec.default: true` (and no nodeSelector) governs every GPU node no other selects; the
  operator writes the owner of each node as the label `nvidia.com/gpu-operator.driver.owner=<NVIDIADriver>`, which
  its driver pools select on, so that label is the answer where it is set. Each NVIDIADriver carries its own
  `spec.upgradePolicy` (absent: the defaults, autoUpgrade on), read per object instead of the ClusterPolicy's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpualign.base import labels as L
from gpualign.model.flavours import AUTO, MODULE_TYPES

CP_API = "nvidia.com/v1"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"  # v26: the NVIDIADriver that owns a node
ND_API = "nvidia.com/v1alpha1"
VERSION_LABEL = "app.kubernetes.io/version"  # the operator Helm chart's appVersion on the ClusterPolicy


@dataclass(frozen=True)
class DriverSource:
    """What one object says a node's driver image is: enough to name the image for any node it governs."""

    origin: str  # clusterpolicy/NAME or nvidiadriver/NAME
    precompiled: bool = True
    repository: str | None = None  # the image's repository: REGISTRY/PATH/IMAGE
    version: str | None = None  # precompiled: the branch; regular: the full driver version
    node_selector: Mapping[str, str] = field(default_factory=dict)
    digest: bool = False  # a regular image pinned by digest: used as is, no OS tag
    problem: str | None = None  # why no image can be named from this object
    host_managed: str | None = None  # why the operator deploys no driver at all (driver.enabled false)
    one_os_tag: bool = False  # ClusterPolicy mode: the operator takes one OS tag for every kernel
    module_type: str = AUTO  # kernelModuleType: auto, open or proprietary (gpualign.model.flavours)
    default: bool = False  # v26: spec.default, the NVIDIADriver for the GPU nodes no other selects
    upgrade_policy: UpgradePolicy | None = None  # v26: the NVIDIADriver's own spec.upgradePolicy, with defaults

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_selector.items())

    @property
    def name(self) -> str:
        return self.origin.split("/", 1)[1]


@dataclass(frozen=True)
class UpgradePolicy:
    """An NVIDIADriver's spec.upgradePolicy as the v26 operator reads it (GetUpgradePolicyWithDefaults): absent,
    autoUpgrade is on with one node at a time."""

    auto_upgrade: bool = True
    max_parallel: int = 1
    max_unavailable: str = "25%"
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False)  # as written: its podDeletion and drain

    @classmethod
    def read(cls, raw: Any) -> UpgradePolicy:
        if not isinstance(raw, Mapping):
            return cls()
        parallel = raw.get("maxParallelUpgrades")
        return cls(auto_upgrade=raw.get("autoUpgrade", True) is not False,
                   max_parallel=int(parallel) if isinstance(parallel, int) and parallel >= 0 else 1,
                   max_unavailable=_str(raw.get("maxUnavailable")) or "25%", raw=dict(raw))


@dataclass(frozen=True)
class OperatorConfig:
    """The operator's driver configuration in one cluster."""

    cluster_policy: str | None
    version: str | None  # the operator version, when the ClusterPolicy carries it
    sources: tuple[DriverSource, ...]
    nvidiadriver_mode: bool
    warnings: tuple[str, ...] = ()
    auto_upgrade: bool = False  # spec.driver.upgradePolicy.autoUpgrade: the operator's own upgrade walk is on
    upgrade_policy: bool = False  # whether the ClusterPolicy has spec.driver.upgradePolicy at all
    walk_policy: Mapping[str, Any] = field(default_factory=dict, hash=False)  # that upgradePolicy, as written

    def walk_policy_for(self, labels: Mapping[str, str]) -> Mapping[str, Any]:
        """The upgradePolicy the operator walks a node by, as written: its NVIDIADriver's (v26), else the
        ClusterPolicy's."""
        if self.per_driver_upgrades:
            source, _ = self.source_for(labels)
            return source.upgrade_policy.raw if source is not None and source.upgrade_policy is not None else {}
        return self.walk_policy

    @property
    def per_driver_upgrades(self) -> bool:
        """Whether the operator walks each NVIDIADriver's nodes by that object's own upgradePolicy (v26 in
        NVIDIADriver mode) rather than by the ClusterPolicy's."""
        return self.nvidiadriver_mode and any(s.upgrade_policy is not None for s in self.sources)

    def operator_walks(self, source: DriverSource | None) -> bool:
        """Whether the operator's own upgrade controller walks the nodes `source` governs."""
        if self.per_driver_upgrades:
            return source is not None and source.upgrade_policy is not None and source.upgrade_policy.auto_upgrade
        return self.auto_upgrade

    def source_for(self, labels: Mapping[str, str]) -> tuple[DriverSource | None, str | None]:
        """(source, None), or (None, why no source governs the node)."""
        if not self.nvidiadriver_mode:
            return (self.sources[0], None) if self.sources else (None, "no ClusterPolicy")
        owner = labels.get(OWNER_LABEL)
        if owner:  # v26 writes which NVIDIADriver owns the node; its driver pools select on that label
            named = next((s for s in self.sources if s.name == owner), None)
            if named is not None:
                return named, None
        chosen = [s for s in self.sources if not s.default and s.selects(labels)]
        if not chosen and any(labels.get(k) == "true" for k in (L.GPU_PRESENT, L.PCI_NVIDIA, *L.PCI_NVIDIA_BY_CLASS)):
            chosen = [s for s in self.sources if s.default]  # the GPU nodes no other NVIDIADriver selects
        if len(chosen) > 1:
            names = " and ".join(s.origin for s in chosen)
            return None, (f"{names} both select this node: the operator refuses overlapping NVIDIADrivers "
                          "(ConflictingNodeSelector) and deploys neither")
        if not chosen:
            checked = "; ".join(f"{src.origin} selects "
                                + (",".join(f"{k}={v}" for k, v in sorted(src.node_selector.items())) or "every node")
                                for src in self.sources) or "there is none"
            return None, (f"no NVIDIADriver selects this node (ClusterPolicy {self.cluster_policy} sets "
                          f"driver.useNvidiaDriverCRD): the operator deploys no driver here (checked: {checked})")
        return chosen[0], None


def _str(value: Any) -> str:
    return "" if value is None else str(value).strip()


_REPOSITORY = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*")
_IMAGE = re.compile(r"[a-z0-9]([a-z0-9._/-]*[a-z0-9])?")
_VERSION = re.compile(r"[0-9]{3,4}(\.[0-9]+){0,2}")


def _image_parts(origin: str, spec: Mapping[str, Any], precompiled: bool, field_prefix: str) -> DriverSource:
    """Repository and version from repository/image/version, as ImagePath and resolveDriverTag combine them."""
    repository, image, version = _str(spec.get("repository")), _str(spec.get("image")), _str(spec.get("version"))
    if not repository and not version:
        # kbld style: the whole reference in `image` ("HOST/PATH/driver:580")
        name, sep, tag = image.rpartition(":")
        if image and sep and "/" not in tag and "@" not in image:
            return DriverSource(origin, precompiled, name, tag)
        if image and "@" in image and not precompiled:
            return DriverSource(origin, precompiled, image.split("@", 1)[0], image.split("@", 1)[1], digest=True)
        return DriverSource(origin, precompiled, problem=(
            f"{origin}: {field_prefix}repository, .image and .version are empty (the operator then takes its "
            "DRIVER_IMAGE environment, which gpualign cannot read): set them, or pass --repository and "
            "--driver-branch"))
    missing = [n for n, v in (("repository", repository), ("image", image), ("version", version)) if not v]
    if missing:
        return DriverSource(origin, precompiled, problem=(
            f"{origin}: {field_prefix}{', .'.join(missing)} missing: the operator cannot name a driver image"))
    if not _REPOSITORY.fullmatch(repository.rstrip("/")):
        return DriverSource(origin, precompiled, problem=(
            f"{origin}: {field_prefix}repository {repository!r} is not an image repository (expected "
            "REGISTRY[/PATH], e.g. nvcr.io/nvidia)"))
    if not _IMAGE.fullmatch(image):
        return DriverSource(origin, precompiled, problem=(
            f"{origin}: {field_prefix}image {image!r} is not an image name (e.g. driver)"))
    if not version.startswith("sha256:") and not _VERSION.fullmatch(version):
        return DriverSource(origin, precompiled, problem=(
            f"{origin}: {field_prefix}version {version!r} is neither a driver branch nor a driver version (e.g. "
            "580, or 580.95.05)"))
    if version.startswith("sha256:"):
        if precompiled:
            return DriverSource(origin, precompiled, problem=(
                f"{origin}: {field_prefix}version is a digest; precompiled images are named per kernel, so the "
                "operator refuses a digest here"))
        return DriverSource(origin, precompiled, f"{repository}/{image}", version, digest=True)
    return DriverSource(origin, precompiled, f"{repository.rstrip('/')}/{image}", version)


def _api_problem(obj: Mapping[str, Any], kind: str, expected: str) -> str | None:
    api = _str(obj.get("apiVersion"))
    if api and api != expected:
        name = _str((obj.get("metadata") or {}).get("name"))
        return f"{kind} {name} is {api}, which gpualign does not read (it reads {expected})"
    return None


def from_cluster_policy(obj: Mapping[str, Any]) -> tuple[DriverSource, bool]:
    """(the ClusterPolicy's own source, whether it hands the driver to NVIDIADriver objects)."""
    name = _str((obj.get("metadata") or {}).get("name")) or "?"
    origin = f"clusterpolicy/{name}"
    if problem := _api_problem(obj, "ClusterPolicy", CP_API):
        return DriverSource(origin, problem=problem), False
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    driver = spec.get("driver")
    if not isinstance(driver, Mapping):
        return DriverSource(origin, problem=f"{origin} has no spec.driver: the operator cannot name a driver"), False
    if driver.get("enabled") is False:
        return DriverSource(origin, host_managed=f"{origin} sets spec.driver.enabled: false (the driver is "
                                                 "installed on the host)"), False
    if driver.get("useNvidiaDriverCRD") is True:
        # the NVIDIADrivers name every image: the ClusterPolicy's repository, image and version are not read (a
        # ClusterPolicy written for this mode often has none)
        return DriverSource(origin, one_os_tag=False), True
    precompiled = driver.get("usePrecompiled") is True
    source = _image_parts(origin, driver, precompiled, "spec.driver.")
    module_type, problem = _module_type(origin, driver, "spec.driver.")
    return DriverSource(origin=source.origin, precompiled=source.precompiled, repository=source.repository,
                        version=source.version, node_selector={}, digest=source.digest,
                        problem=source.problem or problem, host_managed=None, one_os_tag=True,
                        module_type=module_type), \
        driver.get("useNvidiaDriverCRD") is True


def _module_type(origin: str, spec: Mapping[str, Any], field_prefix: str) -> tuple[str, str | None]:
    """(kernelModuleType, why it cannot be read): absent is the CRD's default, auto."""
    value = _str(spec.get("kernelModuleType")) or AUTO
    if value not in MODULE_TYPES:
        return AUTO, f"{origin}: {field_prefix}kernelModuleType {value!r} is not one of {', '.join(MODULE_TYPES)}"
    return value, None


def from_nvidia_driver(obj: Mapping[str, Any]) -> DriverSource:
    name = _str((obj.get("metadata") or {}).get("name")) or "?"
    origin = f"nvidiadriver/{name}"
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    raw_selector = spec.get("nodeSelector")
    default = spec.get("default") is True
    selector = {str(k): str(v) for k, v in raw_selector.items()} if isinstance(raw_selector, Mapping) \
        else {} if default else {L.GPU_PRESENT: "true"}
    policy = UpgradePolicy.read(spec.get("upgradePolicy")) if "upgradePolicy" in spec or "default" in spec \
        else None  # a field only a v26 NVIDIADriver has: the operator reads its policy per object
    if problem := _api_problem(obj, "NVIDIADriver", ND_API):
        return DriverSource(origin, node_selector=selector, problem=problem, default=default,
                            upgrade_policy=policy)
    driver_type = _str(spec.get("driverType")) or "gpu"
    if driver_type != "gpu":
        return DriverSource(origin, node_selector=selector, problem=(
            f"{origin} has driverType {driver_type}: gpualign derives images for driverType gpu only"),
            default=default, upgrade_policy=policy)
    source = _image_parts(origin, spec, spec.get("usePrecompiled") is True, "spec.")
    module_type, problem = _module_type(origin, spec, "spec.")
    return DriverSource(origin=source.origin, precompiled=source.precompiled, repository=source.repository,
                        version=source.version, node_selector=selector,
                        digest=source.digest, problem=source.problem or problem, module_type=module_type,
                        default=default,
                        upgrade_policy=policy)


def overlaps(sources: Iterable[DriverSource], nodes: Iterable[tuple[str, Mapping[str, str]]]) -> list[str]:
    """One line per pair of NVIDIADrivers that select a common node (naming one such node)."""
    listed = [s for s in sources if not s.default]  # the default one governs only what no other selects
    lines = []
    for i, a in enumerate(listed):
        for b in listed[i + 1:]:
            both = sorted(n for n, labels in nodes if a.selects(labels) and b.selects(labels))
            if both:
                lines.append(f"{a.origin} and {b.origin} both select {both[0]}"
                             + (f" and {len(both) - 1} more node(s)" if len(both) > 1 else "")
                             + ": the operator refuses overlapping NVIDIADrivers (ConflictingNodeSelector)")
    return lines


def read(cluster_policies: Sequence[Mapping[str, Any]], nvidia_drivers: Sequence[Mapping[str, Any]],
         nodes: Iterable[tuple[str, Mapping[str, str]]] = ()) -> OperatorConfig | None:
    """The operator's configuration, or None when the cluster has no ClusterPolicy (no operator to follow)."""
    if not cluster_policies:
        return None
    warnings: list[str] = []
    ordered = sorted(cluster_policies, key=lambda o: _str((o.get("metadata") or {}).get("name")))
    first = ordered[0]
    if len(ordered) > 1:
        warnings.append(f"{len(ordered)} ClusterPolicies: the operator acts on one; gpualign reads "
                        f"{_str((first.get('metadata') or {}).get('name'))}")
    cp_source, crd_mode = from_cluster_policy(first)
    labels = (first.get("metadata") or {}).get("labels") or {}
    version = _str(labels.get(VERSION_LABEL)) or None
    cp_name = cp_source.origin.split("/", 1)[1]
    driver = ((first.get("spec") or {}).get("driver") or {}) if isinstance(first.get("spec"), Mapping) else {}
    policy = driver.get("upgradePolicy") if isinstance(driver, Mapping) else None
    written: Mapping[str, Any] = dict(policy) if isinstance(policy, Mapping) else {}
    walk: dict[str, Any] = {"auto_upgrade": written.get("autoUpgrade") is True,
                            "upgrade_policy": isinstance(policy, Mapping), "walk_policy": written}
    if crd_mode and cp_source.problem is None:
        sources = tuple(from_nvidia_driver(o) for o in
                        sorted(nvidia_drivers, key=lambda o: _str((o.get("metadata") or {}).get("name"))))
        warnings.extend(overlaps(sources, list(nodes)))
        return OperatorConfig(cp_name, version, sources, True, tuple(warnings), **walk)
    return OperatorConfig(cp_name, version, (cp_source,), False, tuple(warnings), **walk)


def daemonset_image(labels: Mapping[str, str], daemonsets: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(DaemonSet name, driver image) of the operator DaemonSet whose nodeSelector picks this node: the image the
    operator deploys there next."""
    for ds in daemonsets:
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        selector = template.get("nodeSelector") or {}
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            containers = template.get("containers") or []
            driver = next((c for c in containers if c.get("name") == "nvidia-driver-ctr"),
                          containers[0] if containers else {})
            return f"{(ds.get('metadata') or {}).get('namespace')}/{(ds.get('metadata') or {}).get('name')}", \
                str(driver.get("image", ""))
    return None
