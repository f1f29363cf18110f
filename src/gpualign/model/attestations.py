"""What a driver image is made of and how it was made, as documents a policy can read. Pure.

- The SBOM (SPDX 2.3, JSON): the image; NVIDIA's module source package and user space packages, at their versions;
  the kernel's headers package it was compiled against; and each kernel module file with its SHA-256.
- The provenance (SLSA v1): the tag and kernel asked for, the dependencies resolved (headers, module source, the
  builder), and what the build verified (symbol CRCs checked against the kernel's Module.symvers, version magic).

Both are signed as in-toto attestations (gpualign.model.cosign) by the key that signs the image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUILD_TYPE = "https://gpualign.io/buildtypes/driver-image/v1"


@dataclass(frozen=True)
class Evidence:
    """What one build made the image from, and what it checked."""

    tag: str
    kernel: str  # the release: 6.12.118+deb13-amd64
    branch: str
    driver_version: str  # the modules' NVIDIA version
    module_source: str  # the package they were compiled from: nvidia-kernel-source, nvidia-open-kernel-source, …
    modules_from: str  # compiled | cache | shared | given
    modules: tuple[tuple[str, str], ...]  # (file name, sha256)
    userspace: tuple[str, ...]  # NVIDIA's user space packages, at driver_version
    builder: str  # gpualign's version
    symbols_checked: int = 0
    started: str = ""
    finished: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the Secure Boot signer

    @property
    def headers(self) -> str:
        return f"linux-headers-{self.kernel}"


def _pkg(ident: str, name: str, version: str, supplier: str = "Organization: Debian") -> dict[str, Any]:
    return {"SPDXID": ident, "name": name, "versionInfo": version, "supplier": supplier,
            "downloadLocation": "NOASSERTION", "filesAnalyzed": False}


def spdx(repository: str, digest: str, ev: Evidence, created: str) -> dict[str, Any]:
    """An SPDX 2.3 document of the image `digest`."""
    image = _pkg("SPDXRef-Image", f"{repository}:{ev.tag}", digest, "Organization: gpualign")
    packages = [image, _pkg("SPDXRef-Package-module-source", ev.module_source, ev.driver_version),
                _pkg("SPDXRef-Package-headers", ev.headers, ev.kernel)]
    packages += [_pkg(f"SPDXRef-Package-userspace-{i}", name, ev.driver_version)
                 for i, name in enumerate(ev.userspace)]
    moddir = f"/lib/modules/{ev.kernel}/kernel/drivers/video"
    files: list[dict[str, Any]] = [
        {"SPDXID": f"SPDXRef-File-{i}", "fileName": f"{moddir}/{name}",
         "checksums": [{"algorithm": "SHA256", "checksumValue": sha}]} for i, (name, sha) in enumerate(ev.modules)]
    relations: list[dict[str, str]] = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                                        "relatedSpdxElement": "SPDXRef-Image"}]
    contained = [str(p["SPDXID"]) for p in packages[1:] if p["SPDXID"] != "SPDXRef-Package-headers"]
    contained += [str(f["SPDXID"]) for f in files]
    relations += [{"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS", "relatedSpdxElement": ident}
                  for ident in contained]
    relations.append({"spdxElementId": "SPDXRef-Package-headers", "relationshipType": "BUILD_DEPENDENCY_OF",
                      "relatedSpdxElement": "SPDXRef-Image"})
    return {"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
            "name": f"{repository}:{ev.tag}",
            "documentNamespace": f"https://gpualign.io/spdx/{ev.tag}/{digest.removeprefix('sha256:')}",
            "creationInfo": {"created": created, "creators": [f"Tool: gpualign-{ev.builder}"]},
            "packages": packages, "files": files, "relationships": relations}


def provenance(ev: Evidence) -> dict[str, Any]:
    """A SLSA v1 provenance predicate of the build."""
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"tag": ev.tag},
            "internalParameters": {"kernel": ev.kernel, "branch": ev.branch, "modulesFrom": ev.modules_from,
                                   **ev.extra},
            "resolvedDependencies": [
                {"name": ev.headers, "annotations": {"version": ev.kernel}},
                {"name": ev.module_source, "annotations": {"version": ev.driver_version}},
                *({"name": name, "annotations": {"version": ev.driver_version}} for name in ev.userspace)],
        },
        "runDetails": {
            "builder": {"id": f"https://gpualign.io/builder/ensure@{ev.builder}"},
            "metadata": {"startedOn": ev.started, "finishedOn": ev.finished},
            "byproducts": [{"name": "verification", "annotations": {
                "symbolCrcsChecked": ev.symbols_checked, "modules": len(ev.modules),
                "versionMagic": ev.kernel}}],
        },
    }
