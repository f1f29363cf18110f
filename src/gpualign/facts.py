"""Node → NodeFacts: what the labels say about one node, and what they fail to say."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpualign import labels as L
from gpualign.version import DriverVersion

_KERNEL = re.compile(r"[0-9][A-Za-z0-9._+~-]{0,62}")
_OS_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_OS_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,62}")


@dataclass(frozen=True)
class NodeFacts:
    """One node as its labels describe it. `problems` lists why a derived image would be unknown."""

    name: str
    gpu: bool
    kernel: str | None
    os_id: str | None
    os_version: str | None
    driver: DriverVersion | None
    upgrade_state: str | None
    unschedulable: bool = False
    host_driver: bool = False
    problems: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


def _driver(labels: Mapping[str, str]) -> tuple[DriverVersion | None, str | None]:
    full = labels.get(L.DRIVER_CURRENT_FULL)
    if full:
        try:
            return DriverVersion.parse(full), None
        except ValueError:
            return None, f"unparsable driver label {L.DRIVER_CURRENT_FULL}={full!r}"
    for names in (L.DRIVER_CURRENT, L.DRIVER_LEGACY):
        if names["major"] in labels:
            try:
                return DriverVersion.from_parts(labels[names["major"]], labels.get(names["minor"], ""),
                                                labels.get(names["rev"])), None
            except ValueError as err:
                return None, f"unparsable driver labels {names['major'].rsplit('.', 1)[0]}.*: {err}"
    return None, None


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Read one Node (a dict as the API returns it). Never raises: bad labels become problems."""
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    raw_labels = meta.get("labels")
    labels = {str(k): str(v) for k, v in raw_labels.items()} if isinstance(raw_labels, Mapping) else {}
    raw_ann = meta.get("annotations")
    annotations = {str(k): str(v) for k, v in raw_ann.items()} if isinstance(raw_ann, Mapping) else {}
    spec = node.get("spec") if isinstance(node, Mapping) else None
    unschedulable = bool(spec.get("unschedulable")) if isinstance(spec, Mapping) else False
    name = str(meta.get("name") or "<unnamed>")
    problems: list[str] = []

    kernel = labels.get(L.KERNEL)
    if kernel is None:
        problems.append("no kernel-version.full label: is Node Feature Discovery running?")
    elif not _KERNEL.fullmatch(kernel):
        problems.append(f"unparsable kernel label {kernel!r}")
        kernel = None
    os_id = labels.get(L.OS_ID)
    os_version = labels.get(L.OS_VERSION)
    if os_id is None or os_version is None:
        missing = "system-os_release.ID" if os_id is None else "system-os_release.VERSION_ID"
        problems.append(f"no {missing} label: is Node Feature Discovery running?")
    if os_id is not None and not _OS_ID.fullmatch(os_id):
        problems.append(f"unparsable OS ID label {os_id!r}")
        os_id = None
    if os_version is not None and not _OS_VERSION.fullmatch(os_version):
        problems.append(f"unparsable OS VERSION_ID label {os_version!r}")
        os_version = None
    driver, driver_problem = _driver(labels)
    if driver_problem:
        problems.append(driver_problem)
    return NodeFacts(
        name=name,
        gpu=labels.get(L.GPU_PRESENT) == "true",
        kernel=kernel,
        os_id=os_id,
        os_version=os_version,
        driver=driver,
        upgrade_state=labels.get(L.UPGRADE_STATE),
        unschedulable=unschedulable,
        host_driver=labels.get(L.DEPLOY_DRIVER) == "false",
        problems=tuple(problems),
        labels=labels,
        annotations=annotations,
    )
