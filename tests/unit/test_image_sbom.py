"""The SBOM of gpualign's own image, read from real inputs: this machine's dpkg status file (a Debian system, as
the image's base is) and the distributions installed in the test environment (gpualign's own among them)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from image_sbom import debian_packages, document, python_packages  # noqa: E402

from gpualign import __version__  # noqa: E402

STATUS = Path("/var/lib/dpkg/status")


def test_every_installed_debian_package_is_listed_once_with_its_version_and_architecture():
    text = STATUS.read_text(errors="replace")
    debs = debian_packages(text)
    names = [name for name, _, _ in debs]
    installed = text.count("\nStatus: install ok installed") + text.startswith("Status: install ok installed")
    assert len(set(debs)) == len(debs) and len(debs) <= installed
    assert {"libc6", "dpkg"} <= set(names)
    assert all(version and arch for _, version, arch in debs)


def test_gpualign_and_its_dependencies_are_listed_from_their_metadata():
    wheels = dict(python_packages(Path(sysconfig.get_paths()["purelib"])))
    assert wheels["gpualign"] == __version__
    assert {"lightkube", "typer", "msgspec", "cryptography"} <= set(wheels)


def test_the_document_describes_the_image_and_contains_each_package_with_its_purl():
    debs = [("libc6", "2.36-9+deb12u14", "amd64"), ("python3", "3.11.2-1+b1", "amd64")]
    doc = document("localhost/gpualign:0.1.0", debs, [("gpualign", "0.1.0")], "2026-12-05T00:00:00Z")
    assert doc["spdxVersion"] == "SPDX-2.3" and doc["name"] == "localhost/gpualign:0.1.0"
    ids = [p["SPDXID"] for p in doc["packages"]]
    assert len(set(ids)) == len(ids) == 4
    contained = {r["relatedSpdxElement"] for r in doc["relationships"] if r["relationshipType"] == "CONTAINS"}
    assert contained == set(ids[1:])
    purls = {ref["referenceLocator"] for p in doc["packages"] for ref in p.get("externalRefs", [])}
    assert purls == {"pkg:deb/debian/libc6@2.36-9+deb12u14?arch=amd64", "pkg:deb/debian/python3@3.11.2-1+b1?arch=amd64",
                     "pkg:pypi/gpualign@0.1.0"}
    again = document("localhost/gpualign:0.1.0", debs, [("gpualign", "0.1.0")], "2026-12-06T00:00:00Z")
    assert again["documentNamespace"] == doc["documentNamespace"]  # named by what it holds, not when it was made
