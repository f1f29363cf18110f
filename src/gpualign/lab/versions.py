"""Pinned versions of the lab's binaries and where their builds are cached.

Bump all three together: kwok v0.8.0 is built against Kubernetes 1.36, and etcd 3.6 is what 1.36 tests with.
"""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"
KWOK = "v0.8.0"

KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ETCD_BINARIES = ("etcd",)
KWOK_BINARIES = ("kwok",)
ALL_BINARIES = KUBERNETES_BINARIES + ETCD_BINARIES + KWOK_BINARIES


def cache_root() -> Path:
    """~/.cache/gpualign (or $GPUALIGN_CACHE, or $XDG_CACHE_HOME/gpualign)."""
    if env := os.environ.get("GPUALIGN_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpualign"


def version_key() -> str:
    return f"k8s-{KUBERNETES}_etcd-{ETCD}_kwok-{KWOK}"


def default_bin_dir() -> Path:
    """Where `lab build` puts binaries: keyed by every pinned version, outside the repository."""
    if env := os.environ.get("GPUALIGN_LAB_BIN"):
        return Path(env)
    return cache_root() / "lab" / version_key() / "bin"
