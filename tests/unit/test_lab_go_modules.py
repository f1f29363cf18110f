"""kwok's and Helm's wrapper modules build after Kubernetes' and take its compiled packages from Go's build cache
(gpualign.lab.build.AFTER): that holds only while every module they share is required at the same version, and
Kubernetes' staging modules at their published version, not v0.0.0 (the cache keys a package by its module's
version). A bump of one wrapper alone would silently compile the shared packages twice."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpualign.lab import build

GO = Path(build.__file__).parent / "go"


def required(module: str) -> dict[str, str]:
    """The versions a wrapper's go.mod requires (its replace lines aside)."""
    text = (GO / module / "go.mod").read_text()
    return {m[1]: m[2] for m in re.finditer(r"^\s*(?:require\s+)?([\w./~-]+)\s+(v\S+)(?:\s*//.*)?$", text, re.M)
            if "=>" not in m[0]}


@pytest.mark.parametrize("module", sorted(k for k, v in build.AFTER.items() if v == "kubernetes" and k != "kubelet"))
def test_a_module_that_waits_for_kubernetes_shares_its_versions(module):
    kubernetes, other = required("kubernetes"), required(module)
    shared = set(kubernetes) & set(other)
    assert len(shared) > 40 and {m: (kubernetes[m], other[m]) for m in shared if kubernetes[m] != other[m]} == {}


def test_kubernetes_requires_its_staging_modules_at_their_published_version():
    staging = {m: v for m, v in required("kubernetes").items() if m.startswith("k8s.io/") and v == "v0.0.0"}
    assert staging == {}
