"""Ledger sources from the command line: files and registries, merged into one set of tags.

A bare tag in a file, or a tag of a registry given with --ledger, answers for the repository the command names
(the sources are merged). A full image reference in a file answers only for its own repository: a tag sitting in an
unrelated repository does not make this repository's image present.

The registry client (and its HTTP stack) is imported only when a registry is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpualign.ledger import file as ledger_file


@dataclass(frozen=True)
class Ledger:
    """The merged ledger: the tags that answer for any repository, the tags held per named repository, and which
    sources were read."""

    tags: frozenset[str]
    sources: tuple[str, ...]
    scoped: frozenset[tuple[str, str]] = field(default=frozenset())  # (repository, tag) from full references
    refused: tuple[tuple[str, str], ...] = ()  # (tag, why): present under the tag, but built for something else

    def has(self, tag: str) -> bool:
        """In the ledger for some repository (used where the repository is not known), and not present but wrong."""
        if any(t == tag for t, _ in self.refused):
            return False
        return tag in self.tags or any(t == tag for _, t in self.scoped)

    def wrong(self, tag: str) -> str | None:
        """Why the image under this tag is present but wrong, or None."""
        return next((why for t, why in self.refused if t == tag), None)

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


def is_registry(source: str) -> bool:
    return source.startswith(("registry://", "oci://", "http://", "https://"))


def load(sources: list[str], *, docker_config: Path | None = None, timeout: float = 10.0,
         missing_ok: bool = False) -> Ledger:
    """missing_ok: a registry repository that does not exist (NAME_UNKNOWN) reads as empty; otherwise it is bad
    input naming the repository, as an empty ledger file is."""
    tags: set[str] = set()
    scoped: set[tuple[str, str]] = set()
    for source in sources:
        if is_registry(source):
            from gpualign.ledger import registry

            client = registry.connect(source, docker_config=docker_config, timeout=timeout)
            try:
                tags.update(client.tags(missing_ok=missing_ok))
            finally:
                client.close()
        else:
            for repo, tag in ledger_file.read(Path(source)):
                if repo is None:
                    tags.add(tag)
                else:
                    scoped.add((repo, tag))
    return Ledger(frozenset(tags), tuple(sources), frozenset(scoped))


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


def load_repositories(repositories: list[str], *, docker_config: Path | None = None, timeout: float = 10.0,
                      read: dict[str, Ledger] | None = None) -> RepoLedgers:
    """Each repository (HOST[:PORT]/PATH/IMAGE) read as registry://REPOSITORY. `read` holds repositories already
    read in this run (several clusters naming one registry read it once); new ones are added to it."""
    read = {} if read is None else read
    for r in sorted(set(repositories) - set(read)):
        # named by the operator's objects: a repository nobody pushed to yet holds no image (all missing)
        read[r] = load([f"registry://{r}"], docker_config=docker_config, timeout=timeout, missing_ok=True)
    return RepoLedgers({r: read[r] for r in sorted(set(repositories))})
