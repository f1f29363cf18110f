"""Inputs check, plan and the controller share: the branch policy, stdin, and the checks that a flag means
something. (The repository images are named under is gpualign.usecases.ledgers.repository_for.)"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpualign.base.errors import BadInput
from gpualign.cli.common import warn

if TYPE_CHECKING:
    from gpualign.model.branches import BranchPolicy
    from gpualign.model.tags import Rules


def branch_policy(branch: str | None, policy_file: Path | None, old_policy: Path | None = None) -> BranchPolicy:
    """--driver-branch, or --branch-policy FILE (--policy is its deprecated spelling)."""
    from gpualign.loaders.branches import load_policy
    from gpualign.model.branches import BranchPolicy
    from gpualign.model.tags import normalize_branch

    if old_policy is not None:
        warn("--policy is deprecated for this command: use --branch-policy (the same file)")
        if policy_file is not None:
            raise BadInput("--policy and --branch-policy name the same file: pass --branch-policy only")
        policy_file = old_policy
    if branch and policy_file:
        raise BadInput("--driver-branch and --branch-policy are exclusive: use one")
    if policy_file:
        return load_policy(policy_file)
    return BranchPolicy(default=normalize_branch(branch) if branch else None)


def check_known_branches(branches: BranchPolicy, rules: Rules) -> None:
    """A warning for a branch the rules do not know (nothing would be published for it, nor pinned)."""
    # the rules' branches, and those gpualign builds from a Debian release's archive (Debian 13's 550)
    known = sorted(rules.published_branches | set(rules.branches) | rules.debian.branches, key=int)
    for branch in sorted(branches.branches):
        if branch not in known:
            warn(f"driver branch {branch} is not one the rules know ({', '.join(known)}): every image for it "
                 "counts as in-house")


def stdin_once(ledger: list[str] | None, nodes_file: Path | None) -> None:
    if (ledger or []).count("-") + (1 if str(nodes_file) == "-" else 0) > 1:
        raise BadInput("stdin (-) can feed one input only: --nodes-file - or one --ledger -")


def driver_version_flag(driver_version: str | None, no_precompiled: bool, branch: str | None = None) -> None:
    """--driver-version names a regular image's version: it needs --no-precompiled, must be a version, and belongs
    to --driver-branch when both are given."""
    if driver_version is None:
        return
    if branch and driver_version.split(".", 1)[0] != branch.split(".", 1)[0]:
        raise BadInput(f"--driver-version {driver_version} is not of --driver-branch {branch}: give one of them, "
                       "or a version of that branch")
    from gpualign.model.version import DriverVersion

    if not no_precompiled:
        raise BadInput("--driver-version names a regular image's version: add --no-precompiled (precompiled "
                       "tags carry the branch only)")
    try:
        DriverVersion.parse(driver_version)
    except ValueError:
        raise BadInput(f"--driver-version {driver_version!r}: expected a driver version such as 580.95.05") from None


def module_type_flag(value: str | None) -> None:
    """--kernel-module-type: one of the GPU Operator's kernelModuleType values (BadInput otherwise)."""
    from gpualign.model.flavours import MODULE_TYPES

    if value is not None and value not in MODULE_TYPES:
        raise BadInput(f"--kernel-module-type {value!r}: expected one of {', '.join(MODULE_TYPES)}")
