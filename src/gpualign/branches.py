"""Which driver branch each node should run: one for all (--driver-branch), or a policy file of node selectors
mapped to branches, as NVIDIADriver resources do per pool. First matching rule wins."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign import selectors
from gpualign.errors import BadInput
from gpualign.tags import _read_yaml, normalize_branch


@dataclass(frozen=True)
class BranchRule:
    selector: selectors.Selector
    branch: str


@dataclass(frozen=True)
class BranchPolicy:
    """`--driver-branch` (rules empty, default set) or a policy file's ordered rules."""

    rules: tuple[BranchRule, ...] = ()
    default: str | None = None

    def branch_for(self, labels: Mapping[str, str]) -> str | None:
        for rule in self.rules:
            if rule.selector.matches(labels):
                return rule.branch
        return self.default


def _selector_text(path: Path, i: int, raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):  # an NVIDIADriver-style nodeSelector map
        return ",".join(f"{k}={v}" for k, v in raw.items())
    if raw is None:
        return ""
    raise BadInput(f"{path}: rule {i + 1}: selector must be a string or a map of labels")


def load_policy(path: Path) -> BranchPolicy:
    """
    pools:
      - selector: "pool=train"            # or nodeSelector: {pool: train}
        branch: "580"
      - selector: ""                      # everything else
        branch: "595"
    """
    data = _read_yaml(path)
    pools = data.get("pools") if isinstance(data, dict) else data
    if not isinstance(pools, list) or not pools:
        raise BadInput(f"{path}: expected `pools:` with a list of {{selector, branch}} rules")
    rules: list[BranchRule] = []
    for i, item in enumerate(pools):
        if not isinstance(item, Mapping) or "branch" not in item:
            raise BadInput(f"{path}: rule {i + 1}: expected a map with `selector` (or `nodeSelector`) and `branch`")
        text = _selector_text(path, i, item.get("selector", item.get("nodeSelector")))
        try:
            rules.append(BranchRule(selectors.parse(text), normalize_branch(str(item["branch"]))))
        except BadInput as err:
            raise BadInput(f"{path}: rule {i + 1}: {err.message}") from None
    return BranchPolicy(tuple(rules))
