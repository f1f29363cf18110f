"""Ledger sources from the command line: files and registries, merged into one set of tags.

A bare tag in a file, or a tag of a registry given with --ledger, answers for the repository the command names
(the sources are merged). A full image reference in a file answers only for its own repository: a tag sitting in an
unrelated repository does not make this repository's image present.

The registry client (and its HTTP stack) is imported only when a registry is read."""

from __future__ import annotations

from pathlib import Path

from gpualign.ledger import file as ledger_file
from gpualign.model.ledger import Ledger, RepoLedgers

__all__ = ["Ledger", "RepoLedgers", "is_registry", "load", "load_repositories"]


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


def load_repositories(repositories: list[str], *, docker_config: Path | None = None, timeout: float = 10.0,
                      read: dict[str, Ledger] | None = None) -> RepoLedgers:
    """Each repository (HOST[:PORT]/PATH/IMAGE) read as registry://REPOSITORY. `read` holds repositories already
    read in this run (several clusters naming one registry read it once); new ones are added to it."""
    read = {} if read is None else read
    for r in sorted(set(repositories) - set(read)):
        # named by the operator's objects: a repository nobody pushed to yet holds no image (all missing)
        read[r] = load([f"registry://{r}"], docker_config=docker_config, timeout=timeout, missing_ok=True)
    return RepoLedgers({r: read[r] for r in sorted(set(repositories))})
