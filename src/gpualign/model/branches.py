"""Which driver branch each node should run: one for all (--driver-branch), or a policy file of node selectors
mapped to branches, as NVIDIADriver resources do per pool. First matching rule wins."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.model import selectors
from gpualign.model.flavours import MODULE_TYPES
from gpualign.model.tags import normalize_branch


@dataclass(frozen=True)
class BranchRule:
    selector: selectors.Selector
    branch: str
    precompiled: bool | None = None  # the pool's usePrecompiled, as an NVIDIADriver sets it; None: the flag decides
    module_type: str | None = None  # the pool's kernelModuleType, as an NVIDIADriver sets it; None: auto


@dataclass(frozen=True)
class BranchPolicy:
    """`--driver-branch` (rules empty, default set) or a policy file's ordered rules."""

    rules: tuple[BranchRule, ...] = ()
    default: str | None = None
    default_module_type: str | None = None  # the ClusterPolicy's kernelModuleType (None: auto)

    @property
    def branches(self) -> frozenset[str]:
        """Every branch the policy names."""
        return frozenset({r.branch for r in self.rules} | ({self.default} if self.default else set()))

    def branch_for(self, labels: Mapping[str, str]) -> str | None:
        rule = self.rule_for(labels)
        return rule.branch if rule else self.default

    def rule_for(self, labels: Mapping[str, str]) -> BranchRule | None:
        return next((rule for rule in self.rules if rule.selector.matches(labels)), None)

    def module_type_of(self, rule: BranchRule | None) -> str | None:
        """The kernelModuleType of the pool `rule` picks: its own, else the policy's default (None: auto)."""
        return (rule.module_type if rule else None) or self.default_module_type


def _selector_text(path: Path, i: int, raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):  # an NVIDIADriver-style nodeSelector map
        return ",".join(f"{k}={v}" for k, v in raw.items())
    if raw is None:
        return ""
    raise BadInput(f"{path}: rule {i + 1}: selector must be a string or a map of labels")


def policy_from(data: Any, path: Path) -> BranchPolicy:
    """A branch policy file's parsed YAML (`path` names it in messages; gpualign.loaders.branches reads it):
    pools:
      - selector: "pool=train"            # or nodeSelector: {pool: train}
        branch: "580"
      - selector: "feature.node.kubernetes.io/system-os_release.ID=rhel"
        branch: "580"
        usePrecompiled: false             # NVIDIA publishes no precompiled RHEL images
      - selector: "pool=hopper"
        branch: "550"
        kernelModuleType: open            # as the pool's NVIDIADriver says it: auto, open or proprietary
      - selector: ""                      # everything else
        branch: "595"
    """
    pools = data.get("pools") if isinstance(data, dict) else data
    if not isinstance(pools, list) or not pools:
        raise BadInput(f"{path}: expected `pools:` with a list of {{selector, branch}} rules")
    rules: list[BranchRule] = []
    for i, item in enumerate(pools):
        if not isinstance(item, Mapping) or "branch" not in item:
            raise BadInput(f"{path}: rule {i + 1}: expected a map with `selector` (or `nodeSelector`) and `branch`")
        text = _selector_text(path, i, item.get("selector", item.get("nodeSelector")))
        unknown = sorted(set(item) - {"selector", "nodeSelector", "branch", "usePrecompiled", "kernelModuleType"})
        if unknown:
            raise BadInput(f"{path}: rule {i + 1}: unknown key {', '.join(map(repr, unknown))} (known: selector, "
                           "nodeSelector, branch, usePrecompiled, kernelModuleType)")
        precompiled = item.get("usePrecompiled")
        if precompiled is not None and not isinstance(precompiled, bool):
            raise BadInput(f"{path}: rule {i + 1}: usePrecompiled must be true or false")
        module_type = item.get("kernelModuleType")
        if module_type is not None and module_type not in MODULE_TYPES:
            raise BadInput(f"{path}: rule {i + 1}: kernelModuleType must be one of {', '.join(MODULE_TYPES)}, "
                           f"not {module_type!r}")
        try:
            rules.append(BranchRule(selectors.parse(text), normalize_branch(str(item["branch"])), precompiled,
                                    module_type))
        except BadInput as err:
            raise BadInput(f"{path}: rule {i + 1}: {err.message}") from None
    return BranchPolicy(tuple(rules))
