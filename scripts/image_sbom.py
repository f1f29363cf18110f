#!/usr/bin/env python3
"""The SBOM of gpualign's own container images: an SPDX 2.3 document of what the image holds, read from the image
itself (buildah mounts it): every Debian package dpkg installed (name, version, architecture, as a Debian purl) and
every Python distribution in /opt/gpualign (gpualign itself among them, as a PyPI purl).

    .venv/bin/python scripts/image_sbom.py localhost/gpualign:0.1.0 > gpualign.spdx.json

`make image` writes it beside each image it builds (scripts/build_image.py), and scripts/publish_image.py attaches
it, signed, when it pushes the image with a key. The reading is pure (dpkg's status file, the distributions'
METADATA); only `read_image` mounts the image.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = "opt/gpualign"  # where the Dockerfile installs gpualign's wheel and its dependencies


def debian_packages(status: str) -> list[tuple[str, str, str]]:
    """(package, version, architecture) of each package dpkg's status file says is installed, sorted."""
    from debian import deb822

    out = []
    for para in deb822.Deb822.iter_paragraphs(status.splitlines()):
        if para.get("Status", "").split()[-1:] == ["installed"] and para.get("Package") and para.get("Version"):
            out.append((para["Package"], para["Version"], para.get("Architecture", "all")))
    return sorted(set(out))


def python_packages(site_packages: Path) -> list[tuple[str, str]]:
    """(distribution, version) of each *.dist-info under site_packages, sorted."""
    out = set()
    for meta in site_packages.glob("*.dist-info/METADATA"):
        headers = HeaderParser().parsestr(meta.read_text(errors="replace"), headersonly=True)
        if headers.get("Name") and headers.get("Version"):
            out.add((str(headers["Name"]), str(headers["Version"])))
    return sorted(out)


def _ident(kind: str, name: str) -> str:
    return f"SPDXRef-{kind}-" + re.sub(r"[^A-Za-z0-9.-]", "-", name)


def document(image: str, debs: Iterable[tuple[str, str, str]], wheels: Iterable[tuple[str, str]],
             created: str) -> dict[str, Any]:
    """An SPDX 2.3 document describing `image` and the packages it contains."""
    packages: list[dict[str, Any]] = [{
        "SPDXID": "SPDXRef-Image", "name": image, "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
        "supplier": "Organization: gpualign", "primaryPackagePurpose": "CONTAINER"}]
    for name, version, arch in debs:
        packages.append({"SPDXID": _ident("Deb", f"{name}-{arch}"), "name": name, "versionInfo": version,
                         "supplier": "Organization: Debian", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
                         "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                           "referenceLocator": f"pkg:deb/debian/{name}@{version}?arch={arch}"}]})
    for name, version in wheels:
        packages.append({"SPDXID": _ident("PyPI", name), "name": name, "versionInfo": version,
                         "supplier": "NOASSERTION", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
                         "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                           "referenceLocator": f"pkg:pypi/{name.lower()}@{version}"}]})
    relations = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                  "relatedSpdxElement": "SPDXRef-Image"}]
    relations += [{"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS",
                   "relatedSpdxElement": p["SPDXID"]} for p in packages[1:]]
    body = json.dumps([packages, relations], sort_keys=True).encode()
    return {"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT", "name": image,
            "documentNamespace": f"https://gpualign.io/spdx/image/{hashlib.sha256(body).hexdigest()[:32]}",
            "creationInfo": {"created": created, "creators": ["Tool: gpualign-image-sbom"]},
            "packages": packages, "relationships": relations}


def read_image(image: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """What the image (in `make image`'s buildah storage) holds: its Debian packages and its Python distributions."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_image import buildah, buildah_cmd

    ctr = buildah("from", "--quiet", "--pull-never", image, capture=True)
    try:
        rootfs = Path(buildah("mount", ctr, capture=True))
        status = (rootfs / "var/lib/dpkg/status").read_text(errors="replace")
        wheels = [w for site in sorted((rootfs / VENV).glob("lib/python3*/site-packages"))
                  for w in python_packages(site)]
    finally:
        subprocess.run(buildah_cmd("rm", ctr), capture_output=True)  # nothing to report if it is already gone
    return debian_packages(status), wheels


def sbom_of(image: str) -> dict[str, Any]:
    debs, wheels = read_image(image)
    return document(image, debs, wheels, dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    json.dump(sbom_of(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
