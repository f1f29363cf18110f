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
