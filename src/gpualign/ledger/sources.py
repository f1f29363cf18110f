"""Ledger sources from the command line: files and registries, merged into one set of tags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpualign.ledger import file as ledger_file
from gpualign.ledger import registry


@dataclass(frozen=True)
class Ledger:
    """The merged ledger: every tag some source holds, and which sources were read."""

    tags: frozenset[str]
    sources: tuple[str, ...]

    def has(self, tag: str) -> bool:
        return tag in self.tags

    def for_repository(self, _repository: str) -> Ledger:
        """One ledger answers for every repository (the --ledger sources are merged)."""
        return self


def is_registry(source: str) -> bool:
    return source.startswith(("registry://", "oci://"))


def load(sources: list[str], *, docker_config: Path | None = None, timeout: float = 10.0) -> Ledger:
    tags: set[str] = set()
    for source in sources:
        if is_registry(source):
            client = registry.connect(source, docker_config=docker_config, timeout=timeout)
            try:
                tags.update(client.tags())
            finally:
                client.close()
        else:
            tags.update(ledger_file.read(Path(source)))
    return Ledger(frozenset(tags), tuple(sources))


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
    def sources(self) -> tuple[str, ...]:
        return tuple(s for ledger in self.by_repo.values() for s in ledger.sources)


def load_repositories(repositories: list[str], *, docker_config: Path | None = None,
                      timeout: float = 10.0) -> RepoLedgers:
    """Each repository (HOST[:PORT]/PATH/IMAGE) read as registry://REPOSITORY."""
    return RepoLedgers({r: load([f"registry://{r}"], docker_config=docker_config, timeout=timeout)
                        for r in sorted(set(repositories))})
