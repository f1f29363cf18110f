"""The use cases' refusals that the command line words with its flags (cli/hints.py): each says what is wrong, and
carries what the edge needs to say which flag sets it right. A module of its own, so that wording an error loads
nothing else."""

from __future__ import annotations

from gpualign.base.errors import BadInput


class DumpOrCluster(BadInput):
    """Both a dump of nodes and a cluster were named."""


class CheckNoLedger(BadInput):
    """check: no ledger was named, and no GPU Operator ClusterPolicy names the repository to check against."""


class PlanNoLedger(BadInput):
    """plan: no ledger was named, and no GPU Operator objects here name the repository."""


class RepositoriesToChoose(BadInput):
    """The GPU Operator's objects name several image repositories (or none), and none was chosen."""

    def __init__(self, repos: list[str]) -> None:
        super().__init__(f"the GPU Operator's objects name {len(repos)} image repositories "
                         f"({', '.join(repos) or 'none'})")
        self.repos = repos


class NotARegistry(BadInput):
    """A ledger that holds no images (a file) where a registry's images are swept."""

    def __init__(self, ledger: str) -> None:
        super().__init__(f"{ledger}: expected registry://HOST[:PORT]/REPO (a file ledger holds no images)")
        self.ledger = ledger
