"""Debian's archive as recorded by scripts/record_debian_kernels.py (tests/data): every headers package of bookworm
and trixie with their -updates, -security and -backports suites, and the Debian releases' table holding the headers
the suites a build reads carry."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

from gpualign.loaders.rules import load_rules

LISTING = Path(__file__).resolve().parent.parent / "data" / "debian-kernels.tsv"
OS_OF = {"bookworm": "debian12", "trixie": "debian13"}


@cache
def listing() -> tuple[tuple[str, str, str, str, str], ...]:
    rows = []
    for line in LISTING.read_text().splitlines():
        if line.startswith("#") or line.startswith("suite\t"):
            continue
        suite, arch, package, version, depends = line.split("\t")
        rows.append((suite, arch, package, version, depends))
    return tuple(rows)


def kernels() -> list[tuple[str, str, str]]:
    """(suite, arch, release) of every kernel ABI whose headers the archive carries (not the -common packages, nor
    the metapackages that name no ABI)."""
    out = []
    for suite, arch, package, _version, _ in listing():
        release = package.removeprefix("linux-headers-")
        if package.startswith("linux-headers-") and release[:1].isdigit() and "-common" not in release \
                and not _is_meta(release):
            out.append((suite, arch, release))
    return out


def _is_meta(release: str) -> bool:
    """linux-headers-6.12-amd64: a metapackage naming a line, not an ABI."""
    return release.split("-", 1)[0].count(".") == 1


def read_suites(os_tag: str) -> tuple[str, ...]:
    """The suites a build of os_tag reads (gpualign.archive.apt.Archive.suites)."""
    suite = {v: k for k, v in OS_OF.items()}[os_tag]
    return suite, f"{suite}-updates", f"{suite}-security"


@cache
def table():
    """The rules' Debian releases, with each release's headers as its read suites carry them in the listing."""
    debian = load_rules(archive_reading=False).debian
    for os_tag in debian.os_tags:
        headers = frozenset(r for s, _a, r in kernels() if s in read_suites(os_tag))
        debian = debian.with_headers(os_tag, headers, "the recorded listing")
    return debian


@cache
def rules():
    return dataclasses.replace(load_rules(archive_reading=False), debian=table())


