"""What the ledger holds, as the model reasons about it: the tags present per repository, and those present but
wrong. Pure: gpualign.ledger.sources reads files and registries into these."""

from __future__ import annotations

from dataclasses import dataclass, field


class Unsigned(str):
    """Why a present image is wrong, when it is that no trusted key signed it: the reason says so by its type."""

    __slots__ = ()


class Unverified(str):
    """Why a present image is wrong, when it is that nothing judged it (its modules never checked, nothing in it
    says what it was built for, its labels unreadable)."""

    __slots__ = ()


@dataclass(frozen=True)
class Refusal:
    """Why the image under a tag must not be walked to: present but wrong (its labels, or its modules as the node's
    kernel would load them), or, where module checks were asked for, not verified."""

    tag: str
    why: str  # one line
    unverified: bool = False  # its modules could not be checked: not known to be wrong


@dataclass(frozen=True)
class Ledger:
    """The merged ledger: the tags that answer for any repository, the tags held per named repository, and which
    sources were read."""

    tags: frozenset[str]
    sources: tuple[str, ...]
    scoped: frozenset[tuple[str, str]] = field(default=frozenset())  # (repository, tag) from full references
    refused: tuple[Refusal, ...] = ()  # present under the tag, but not what the tag says (or not verified)

    def has(self, tag: str) -> bool:
        """In the ledger for some repository (used where the repository is not known), and not present but wrong."""
        if any(r.tag == tag for r in self.refused):
            return False
        return tag in self.tags or any(t == tag for _, t in self.scoped)

    def wrong(self, tag: str) -> Refusal | None:
        """Why the image under this tag must not be walked to, or None."""
        return next((r for r in self.refused if r.tag == tag), None)

    def for_repository(self, repository: str) -> Ledger:
        """The ledger as it answers for one repository: the bare tags, plus the references into that repository."""
        if not self.scoped:
            return self
        mine = {t for r, t in self.scoped if _same_repository(r, repository)}
        return Ledger(self.tags | mine, self.sources, refused=self.refused)

    @property
    def fingerprint(self) -> frozenset[str]:
        """Everything the ledger answers, to tell whether it changed."""
        return self.tags | {f"{r}:{t}" for r, t in self.scoped}


def _same_repository(a: str, b: str) -> bool:
    """Docker Hub's implicit names aside, a repository is compared as written (host included)."""
    def norm(r: str) -> str:
        r = r.rstrip("/").removeprefix("docker.io/")
        return r.removeprefix("library/")
    return norm(a) == norm(b)


@dataclass(frozen=True)
class RepoLedgers:
    """One ledger per image repository: the GPU Operator's objects may name several, each its own registry
    repository."""

    by_repo: dict[str, Ledger]

    def for_repository(self, repository: str) -> Ledger:
        """That repository's ledger (empty when it was not read)."""
        return self.by_repo.get(repository) or Ledger(frozenset(), ())

    @property
    def tags(self) -> frozenset[str]:
        return frozenset(f"{repo}:{tag}" for repo, ledger in self.by_repo.items() for tag in ledger.tags)

    @property
    def fingerprint(self) -> frozenset[str]:
        return self.tags

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(s for ledger in self.by_repo.values() for s in ledger.sources)
