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
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "debian-kernels.tsv"
_ABI_NAMED = re.compile(r"linux-image-\d+\.\d+\.\d+")  # an ABI's own image package, not a metapackage


def stanzas(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if "Package" in fields:
            out.append(fields)
    return out


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
            for fields in stanzas(text):
                row = kept(fields)
                if row is not None:
                    rows.append((suite, arch, *row))
            print(f"{suite} {arch}: read", file=sys.stderr)
    rows.sort()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    header = f"# read from Debian's archive on {time.strftime('%Y-%m-%d', time.gmtime())} by {Path(__file__).name}\n"
    OUT.write_text(header + "suite\tarch\tpackage\tversion\tdepends\n"
                   + "".join("\t".join(r) + "\n" for r in rows))
    print(f"{len(rows)} packages -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
