"""The kernel Debian's archive will install next on each kind of node, read as apt reads it. Pure: the indexes' text
in, the decision out (the door that fetches and verifies them is gpualign.archive.indexes).

A node does not follow a kernel ABI: it follows a metapackage. `linux-image-amd64` (bookworm's 6.1 line, trixie's
6.12), `linux-image-6.12-amd64` (bookworm-security's 6.12 line), `linux-image-cloud-arm64`, … each depends on
exactly one ABI's image package (`linux-image-6.1.0-57-amd64`), and unattended-upgrades installs the candidate
version of the metapackage, so that ABI is what every node of that line boots after its next reboot. The candidate
is the highest version among the suites the node reads at the same priority: the release, `-updates` and
`-security` (backports are read at a lower priority and never chosen by an upgrade).

A line is what `gpualign.model.debian_kernels.DebianKernel.line` names: series, variant, architecture, page size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from debian import deb822
from debian.debian_support import Version

from gpualign.model import debian_kernels

_IMAGE = re.compile(r"linux-image-(?P<release>\d+\.\d+\.\d+.*)")
Line = tuple[str, str, str, str]  # series, variant, arch, pages


@dataclass(frozen=True)
class Announced:
    """The kernel a metapackage installs: its ABI, and where and how the archive says it."""

    release: str  # 6.1.0-57-amd64
    metapackage: str  # linux-image-amd64
    version: str  # the metapackage's Debian version (6.1.192-3)
    suite: str  # where that version is (bookworm-security)

    @property
    def kernel(self) -> debian_kernels.DebianKernel:
        parsed = debian_kernels.parse(self.release)
        assert parsed is not None
        return parsed


_KERNEL_IMAGE_STANZA = re.compile(rb"(?m)^Package: linux-image-")


def kernel_image_stanzas(chunks: Iterable[bytes]) -> str:
    """Of a Packages index arriving in pieces (decompressed), the stanzas of kernel image packages (`linux-image-*`),
    which is all the next kernel is read from: a release's main index is about 56 MB of text for 65,000 packages, of
    which about 100 stanzas are kernel images. Nothing larger than one stanza and one piece is held at once."""
    kept: list[bytes] = []
    rest = b""
    for chunk in chunks:
        rest += chunk
        stanzas = rest.split(b"\n\n")
        rest = stanzas.pop()
        kept.extend(s for s in stanzas if _KERNEL_IMAGE_STANZA.search(s))
    if rest.strip() and _KERNEL_IMAGE_STANZA.search(rest):
        kept.append(rest.rstrip(b"\n"))
    return "".join(s.strip(b"\n").decode("utf-8", errors="replace") + "\n\n" for s in kept)


def metapackages(packages: str, suite: str) -> list[Announced]:
    """The kernel metapackages in one Packages index (text): each linux-image-* package, not an ABI's own, that
    depends on exactly one Debian kernel's image."""
    found = []
    for stanza in deb822.Packages.iter_paragraphs(packages.splitlines(keepends=True), use_apt_pkg=False):
        name = stanza.get("Package", "")
        if not name.startswith("linux-image-") or _IMAGE.fullmatch(name):
            continue
        targets = []
        for relation in stanza.relations.get("depends") or []:
            for alternative in relation:
                m = _IMAGE.fullmatch(alternative["name"])
                if m and debian_kernels.parse(m.group("release")) is not None:
                    targets.append(m.group("release"))
        if len(targets) == 1:
            found.append(Announced(targets[0], name, stanza["Version"], suite))
    return found


def candidates(indexes: Mapping[str, str]) -> dict[str, Announced]:
    """metapackage -> the version apt would install, from the Packages indexes of the suites a node reads at one
    priority (suite -> its index's text): the highest version of each."""
    best: dict[str, Announced] = {}
    for suite, text in sorted(indexes.items()):
        for meta in metapackages(text, suite):
            held = best.get(meta.metapackage)
            if held is None or Version(meta.version) > Version(held.version):
                best[meta.metapackage] = meta
    return best


def by_line(announced: Iterable[Announced]) -> dict[Line, Announced]:
    """Each line's next kernel: the ABI its metapackage's candidate installs. Two metapackages naming one line (a
    transitional one) give the later ABI."""
    out: dict[Line, Announced] = {}
    for a in announced:
        line = a.kernel.line
        held = out.get(line)
        if held is None or a.kernel.abi > held.kernel.abi:
            out[line] = a
    return out


def next_for(kernel_release: str, lines: Mapping[Line, Announced]) -> Announced | None:
    """What a node running `kernel_release` installs next (its line's candidate), or None when no metapackage of
    the suites read follows its line (a backports kernel, a kernel of another release)."""
    parsed = debian_kernels.parse(kernel_release)
    return lines.get(parsed.line) if parsed is not None else None
