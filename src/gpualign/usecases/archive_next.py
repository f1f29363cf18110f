"""What Debian's archive will install next on each GPU node: the kernel its line's metapackage installs, read from
the suites the node's release reads (gpualign.model.next_kernels), through the verified door
(gpualign.archive.indexes), and since when the archive has named it (as first seen here).

It answers per pool (an OS release, a kernel line, an architecture) and per node, so that `plan --kernel next` can
plan every pool onto its own next kernel at once."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpualign.archive.apt import KEYRING
from gpualign.archive.indexes import KEYRING_ENV, ArchiveIndex, IndexNotCarried, keyring_set
from gpualign.model import next_kernels
from gpualign.model.facts import NodeFacts
from gpualign.model.kernels import Kernel
from gpualign.model.makers import SUITES


class Indexes(Protocol):
    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str: ...


@dataclass(frozen=True)
class PoolNext:
    os_tag: str
    series: str
    variant: str
    arch: str
    pages: str
    nodes: tuple[str, ...]
    running: tuple[str, ...]  # the kernels its nodes run now, as NFD labels them
    next: next_kernels.Announced | None
    since: float | None  # when this machine first read the archive naming it

    @property
    def name(self) -> str:
        flavour = "-".join(p for p in (self.variant or "generic", self.arch, self.pages) if p)
        return f"{self.os_tag} {self.series} {flavour}"

    def as_dict(self) -> dict[str, Any]:
        nxt = self.next
        return {"pool": self.name, "os_tag": self.os_tag, "series": self.series, "flavour": self.variant or "generic",
                "arch": self.arch, "pages": self.pages or None, "nodes": list(self.nodes),
                "running": list(self.running), "next": nxt.release if nxt else None,
                "metapackage": nxt.metapackage if nxt else None, "version": nxt.version if nxt else None,
                "suite": nxt.suite if nxt else None,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)) if self.since else None}


@dataclass
class Tonight:
    pools: list[PoolNext] = field(default_factory=list)
    kernels: dict[str, str] = field(default_factory=dict)  # node -> the release it installs next
    unknown: dict[str, str] = field(default_factory=dict)  # node -> why no next kernel is known for it


def debian_archive() -> tuple[Indexes, Path]:
    """The door to Debian's archive as this machine is set to reach it ($GPUALIGN_DEBIAN_MIRROR, its keyring), and
    where first sightings are kept beside its cache."""
    index = ArchiveIndex()
    return index, index.cache / "first-seen.json"


def cannot_verify() -> str | None:
    """Why Debian's archive could not be verified here (gpgv missing, the keyring missing), or None."""
    import os
    import shutil

    if shutil.which("gpgv") is None:
        return "gpgv, the verifier apt uses, is not installed here (Debian's package gpgv)"
    given = keyring_set()
    keyring = given or KEYRING
    if not os.path.isfile(keyring):
        return f"the keyring {keyring} is missing" + (f" (${KEYRING_ENV})" if given else
                                                      " (Debian's package debian-archive-keyring)")
    return None


def read(nodes: Iterable[NodeFacts], index: Indexes, seen: Path | None = None, now: float | None = None) -> Tonight:
    """Each Debian GPU node's next kernel, by pool. seen: where first sightings are kept (None: not kept)."""
    now = time.time() if now is None else now
    out = Tonight()
    pools: dict[tuple[str, tuple[str, str, str, str]], list[NodeFacts]] = {}
    for facts in nodes:
        if facts.os_id != "debian" or not facts.kernel or not facts.os_version:
            if facts.kernel:
                out.unknown[facts.name] = f"{facts.os_id or 'an unknown OS'}: only Debian's archive is read"
            continue
        os_tag = f"debian{facts.os_version.split('.')[0]}"
        parsed = Kernel.from_label(facts.kernel).debian
        if parsed is None or os_tag not in SUITES:
            out.unknown[facts.name] = f"kernel {facts.kernel} on {os_tag}: not a Debian kernel of a release " \
                                      "gpualign reads"
            continue
        pools.setdefault((os_tag, parsed.line), []).append(facts)
    lines: dict[tuple[str, str], dict[next_kernels.Line, next_kernels.Announced] | None] = {}
    firsts = _load(seen)
    for (os_tag, line), members in sorted(pools.items()):
        suite = SUITES[os_tag]
        arch = line[2]
        if (suite, arch) not in lines:
            lines[(suite, arch)] = _lines(index, suite, arch)
        read_lines = lines[(suite, arch)]
        nxt = read_lines.get(line) if read_lines is not None else None
        since = None
        if read_lines is None:
            for facts in members:
                out.unknown[facts.name] = (f"the archive carries no {arch} index in {suite}, {suite}-updates or "
                                           f"{suite}-security")
        elif nxt is not None:
            key = f"{nxt.suite}/{arch}/{nxt.metapackage}/{nxt.release}"
            since = firsts.setdefault(key, now)
            for facts in members:
                out.kernels[facts.name] = nxt.release
        else:
            for facts in members:
                out.unknown[facts.name] = (f"no metapackage of {suite}, {suite}-updates or {suite}-security "
                                           f"follows kernel {facts.kernel}'s line (a backports kernel?)")
        out.pools.append(PoolNext(os_tag=os_tag, series=line[0], variant=line[1], arch=arch, pages=line[3],
                                  nodes=tuple(sorted(f.name for f in members)),
                                  running=tuple(sorted({f.kernel or "" for f in members})), next=nxt, since=since))
    _keep(seen, firsts)
    return out


def _lines(index: Indexes, suite: str, arch: str) -> dict[next_kernels.Line, next_kernels.Announced] | None:
    """Each line's next kernel from the release's three suites, or None when none of them carries the architecture
    (a mirror of one architecture only: its pools are unknown, the others still read)."""
    indexes = {}
    for name in (suite, f"{suite}-updates", f"{suite}-security"):
        try:
            indexes[name] = index.kernel_images(name, arch)
        except IndexNotCarried:
            continue
    return next_kernels.by_line(next_kernels.candidates(indexes).values()) if indexes else None


def _load(path: Path | None) -> dict[str, float]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def _keep(path: Path | None, firsts: dict[str, float]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".first-seen.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(firsts, handle, sort_keys=True)
    os.replace(partial, path)
