"""Record the kernels Debian's archive publishes, as the tests read them (tests/data/debian-kernels.tsv).

For each suite a Debian 12 or 13 node installs from (the release, -updates, -security, -backports) and each
architecture gpualign builds (amd64, arm64), it reads the suite's main Packages index and keeps every
`linux-headers-*` package, and every `linux-image-*` metapackage (a name without an ABI: `linux-image-amd64`,
`linux-image-6.12-cloud-arm64`) with the package it depends on, which is the ABI apt installs next.

    .venv/bin/python scripts/record_debian_kernels.py [--mirror URL] [--security URL]

The file is a record of the world on the day it was read: re-run it to take in what Debian has published since.
"""

from __future__ import annotations

import argparse
import lzma
import re
import sys
import time
import urllib.request
from pathlib import Path

SUITES = ("bookworm", "bookworm-updates", "bookworm-security", "bookworm-backports",
          "trixie", "trixie-updates", "trixie-security", "trixie-backports")
ARCHS = ("amd64", "arm64")
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
OUT = DATA / "debian-kernels.tsv"
# The kernel metapackages' own stanzas, verbatim, per suite and architecture (what apt reads to pick the next ABI),
# and one small suite's signed InRelease with the Packages.xz it names (to verify as apt does, offline).
STANZAS = DATA / "debian-packages"
SIGNED = ("trixie-updates", "amd64")
_ABI_NAMED = re.compile(r"linux-image-\d+\.\d+\.\d+")  # an ABI's own image package, not a metapackage


def fields_of(block: str) -> dict[str, str]:
    """One stanza's fields (continuation lines joined)."""
    fields: dict[str, str] = {}
    key = None
    for line in block.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def kept(fields: dict[str, str]) -> tuple[str, str, str] | None:
    name = fields["Package"]
    if name.startswith("linux-headers-"):
        return name, fields.get("Version", ""), ""
    if name.startswith("linux-image-") and not _ABI_NAMED.match(name) and not name.endswith(("-dbg", "-unsigned")):
        depends = fields.get("Depends", "")
        first = next((d.split("|")[0].split("(")[0].strip() for d in depends.split(",")
                      if d.strip().startswith("linux-image-")), "")
        return name, fields.get("Version", ""), first
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    parser.add_argument("--security", default="http://deb.debian.org/debian-security")
    args = parser.parse_args()
    rows = []
    for suite in SUITES:
        base = args.security if suite.endswith("-security") else args.mirror
        for arch in ARCHS:
            url = f"{base}/dists/{suite}/main/binary-{arch}/Packages.xz"
            with urllib.request.urlopen(url, timeout=120) as response:
                text = lzma.decompress(response.read()).decode()
            meta = []
            for block in text.split("\n\n"):
                fields = fields_of(block)
                row = kept(fields) if "Package" in fields else None
                if row is not None:
                    rows.append((suite, arch, *row))
                    if row[2]:  # a metapackage naming the ABI it installs
                        meta.append(block.strip() + "\n")
            STANZAS.mkdir(parents=True, exist_ok=True)
            (STANZAS / f"{suite}_{arch}.Packages").write_text("\n".join(meta))
            print(f"{suite} {arch}: read", file=sys.stderr)
    suite, arch = SIGNED
    with urllib.request.urlopen(f"{args.mirror}/dists/{suite}/InRelease", timeout=120) as response:
        (STANZAS / f"{suite}.InRelease").write_bytes(response.read())
    with urllib.request.urlopen(f"{args.mirror}/dists/{suite}/main/binary-{arch}/Packages.xz", timeout=120) as response:
        (STANZAS / f"{suite}_main_{arch}.Packages.xz").write_bytes(response.read())
    rows.sort()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    header = f"# read from Debian's archive on {time.strftime('%Y-%m-%d', time.gmtime())} by {Path(__file__).name}\n"
    OUT.write_text(header + "suite\tarch\tpackage\tversion\tdepends\n"
                   + "".join("\t".join(r) + "\n" for r in rows))
    print(f"{len(rows)} packages -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
