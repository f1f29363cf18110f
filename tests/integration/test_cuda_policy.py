"""The admission policy on the real API server: GPU workloads without a driver floor are refused at apply time."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def plab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("policy") / "state", scenario="empty")
    kube = lab.kube()
    for ns in ("ml", "soft"):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"team": ns}}})
        wait_for(lambda ns=ns: kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), what="SA")
    yield lab
    run_cli("lab", "down", env=lab.env)


def kubectl_apply(lab, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "apply", *extra,
                           "-f", "-"], input=text, capture_output=True, text=True)


def deployment(name: str, ns: str = "ml", *, gpu: bool = True, annotation: str | None = None) -> str:
    ann = f"\n      annotations:\n        gpualign.io/cuda: \"{annotation}\"" if annotation else ""
    limits = "\n        resources:\n          limits: {nvidia.com/gpu: 1}" if gpu else ""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}{ann}
    spec:
      containers:
      - name: main
        image: nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04{limits}
"""


def inject(lab, text: str, cuda: str) -> str:
    res = lab.cli("cuda", "inject", "--cuda", cuda, "-f", "-", input=text)
    assert res.code == 0, res.err
    return res.out


def apply_policy(lab, *args: str) -> None:
    res = lab.cli("cuda", "policy", *args)
    assert res.code == 0, res.err
    applied = kubectl_apply(lab, res.out)
    assert applied.returncode == 0, applied.stderr


def test_policy_refuses_admits_and_checks_declared_cuda(plab):
    apply_policy(plab, "--namespace-selector", "team=ml")
    # the API server's policy informer needs a moment: wait until the first refusal
    refused = wait_for(lambda: (r := kubectl_apply(plab, deployment("bare"))).returncode != 0 and r, timeout=30,
                       what="policy in force")
    assert "GPU Deployment bare has no driver floor: its nodeAffinity must bound the driver version" in \
        refused.stderr and "gpualign cuda inject --cuda X" in refused.stderr

    ok = kubectl_apply(plab, inject(plab, deployment("bare"), "12.4"))
    assert ok.returncode == 0, ok.stderr

    mismatch = kubectl_apply(plab, inject(plab, deployment("declared", annotation="12.8"), "12.2"))
    assert mismatch.returncode != 0
    assert "declares CUDA 12.8, which needs driver >= 570.26.0" in mismatch.stderr
    assert kubectl_apply(plab, inject(plab, deployment("declared", annotation="12.8"), "12.8")).returncode == 0

    unknown = kubectl_apply(plab, inject(plab, deployment("weird", annotation="12.7"), "12.8"))
    assert unknown.returncode != 0 and "unknown CUDA version 12.7" in unknown.stderr

    assert kubectl_apply(plab, deployment("web", gpu=False)).returncode == 0  # non-GPU: unaffected

    pod_only = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: solo\n  namespace: ml\nspec:\n  runtimeClassName: "
                "nvidia\n  containers:\n  - name: c\n    image: x\n")
    refused_pod = kubectl_apply(plab, pod_only)
    assert refused_pod.returncode != 0 and "GPU pod solo has no driver floor" in refused_pod.stderr

    # review 6's M5: a term on the driver's label that bounds nothing (Exists) is no floor
    fake = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: fake-floor\n  namespace: ml\nspec:\n  affinity:\n"
            "    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n"
            "        - matchExpressions:\n          - key: nvidia.com/cuda.driver.major\n            operator: Exists\n"
            "  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n        nvidia.com/gpu: 1\n")
    refused_fake = kubectl_apply(plab, fake)
    assert refused_fake.returncode != 0 and "GPU pod fake-floor has no driver floor" in refused_fake.stderr and \
        "Exists admits any driver" in refused_fake.stderr, refused_fake.stderr


def test_warn_mode_admits_with_a_warning(plab):
    apply_policy(plab, "--namespace-selector", "team=soft", "--mode", "warn")
    res = wait_for(lambda: (r := kubectl_apply(plab, deployment("soft-bare", ns="soft"), "--dry-run=server"))
                   .returncode == 0 and "no driver floor" in r.stderr and r, timeout=30, what="warning")
    assert "Warning:" in res.stderr
    real = kubectl_apply(plab, deployment("soft-bare", ns="soft"))
    assert real.returncode == 0 and "no driver floor" in real.stderr
