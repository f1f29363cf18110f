"""Pinned versions of the lab's binaries and where their builds are cached.

Bump all three together: kwok v0.8.0 (the newest the module proxy serves) is built against Kubernetes 1.36 and drives
1.37's API server as well; 1.37 supports etcd 3.5.24 and later (kubeadm's default is 3.7.0), and the lab keeps 3.6.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpualign.base.cache import cache_root

KUBERNETES = "v1.37.2"
ETCD = "v3.6.16"
KWOK = "v0.8.0"

KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ETCD_BINARIES = ("etcd",)
KWOK_BINARIES = ("kwok",)
ALL_BINARIES = KUBERNETES_BINARIES + ETCD_BINARIES + KWOK_BINARIES
# The real node's kubelet: same module and version stamps as the control plane, its own build target (so adding it
# to a cache that has the rest builds only this one), needed only by a lab with a real node.
KUBELET_BINARIES = ("kubelet",)

# NVIDIA's GPU Operator: the only version the Go module proxy serves (main of 2025-09-17). It is built against
# k8s.io v0.32 and controller-runtime v0.20, so it has its own wrapper module and its own cache directory (inside the
# bin dir, keyed by its version) and does not change the key of the binaries above.
GPU_OPERATOR_MODULE = "github.com/NVIDIA/gpu-operator"
GPU_OPERATOR = "v0.0.0-20250917190837-d73a0086a6ba"
GPU_OPERATOR_COMMIT = GPU_OPERATOR.rsplit("-", 1)[-1]
GPU_OPERATOR_SUBDIR = f"gpu-operator-{GPU_OPERATOR_COMMIT}"


def operator_dir(bin_dir: Path) -> Path:
    """The operator's binary, its /opt/gpu-operator tree (assets, manifests) and CRDs, as `lab build` leaves them."""
    return bin_dir / GPU_OPERATOR_SUBDIR


def version_key() -> str:
    return f"k8s-{KUBERNETES}_etcd-{ETCD}_kwok-{KWOK}"


def default_bin_dir() -> Path:
    """Where `lab build` puts binaries: keyed by every pinned version, outside the repository."""
    if env := os.environ.get("GPUALIGN_LAB_BIN"):
        return Path(env)
    return cache_root() / "lab" / version_key() / "bin"


# Helm (v3), for the chart's tests: its own wrapper module and cache directory, like the operator's.
HELM_MODULE = "helm.sh/helm/v3"
HELM = "v3.22.0"
HELM_KUBE = ("1", "37")  # the Kubernetes version helm assumes offline (`helm template`, lint): its client-go's, v0.37
HELM_SUBDIR = f"helm-{HELM}-kube{'.'.join(HELM_KUBE)}"


def helm_binary(bin_dir: Path | None = None) -> Path:
    return (bin_dir or default_bin_dir()) / HELM_SUBDIR / "helm"


# Toxiproxy, the fault proxy of the reliability tests (the newest the module proxy lists), like helm: own module.
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2"
TOXIPROXY = "v2.5.0"
TOXIPROXY_SUBDIR = f"toxiproxy-{TOXIPROXY}"


def toxiproxy_binary(bin_dir: Path | None = None) -> Path:
    return (bin_dir or default_bin_dir()) / TOXIPROXY_SUBDIR / "toxiproxy-server"


# cosign, the reference signer and verifier of the signing tests (served by the module proxy: v2.6.5, v3.1.3): own
# module, like helm.
COSIGN_MODULE = "github.com/sigstore/cosign/v2"
COSIGN = "v2.6.5"
COSIGN_SUBDIR = f"cosign-{COSIGN}"


def cosign_binary(bin_dir: Path | None = None) -> Path:
    return (bin_dir or default_bin_dir()) / COSIGN_SUBDIR / "cosign"


# sigstore's policy-controller (the module proxy serves v0.13.1): its policy-tester judges an image against a
# ClusterImagePolicy with the webhook's own code, the proof that a signature policy admits what gpualign signs.
POLICY_CONTROLLER_MODULE = "github.com/sigstore/policy-controller"
POLICY_CONTROLLER = "v0.13.1"
POLICY_CONTROLLER_SUBDIR = f"policy-controller-{POLICY_CONTROLLER}"


def policy_tester_binary(bin_dir: Path | None = None) -> Path:
    return (bin_dir or default_bin_dir()) / POLICY_CONTROLLER_SUBDIR / "policy-tester"


# Prometheus' promtool (the module proxy serves v0.316.0, Prometheus 3.16): `promtool test rules` evaluates gpualign's
# alerts with Prometheus' own rule engine, the proof that each way the reboot gate fails closed fires an alert.
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS = "v0.316.0"
PROMTOOL_SUBDIR = f"promtool-{PROMETHEUS}"


def promtool_binary(bin_dir: Path | None = None) -> Path:
    return (bin_dir or default_bin_dir()) / PROMTOOL_SUBDIR / "promtool"
