"""A branch policy file (--branch-policy), read into the model's BranchPolicy."""

from __future__ import annotations

from pathlib import Path

from gpualign.base import yamlio
from gpualign.model.branches import BranchPolicy, policy_from


def load_policy(path: Path) -> BranchPolicy:
    """The policy in `path` (gpualign.model.branches.policy_from says what it holds)."""
    return policy_from(yamlio.read(path), path)
