"""Reading what NVIDIA's real GPU Operator did in a lab: its driver pods, and which object owns each."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.conftest import Lab

DRIVER_PODS = "app.kubernetes.io/component=nvidia-driver"


def operator_driver_pods(lab: Lab) -> dict[str, dict[str, Any]]:
    """node -> {image, state, owner, ds_image}: the driver pods of DaemonSets that a ClusterPolicy or NVIDIADriver
    owns (the operator made them; the lab made none in these scenarios), and the image their DaemonSet names now.
    A pod the scheduler has not bound yet is on no node, so it is not listed (a fresh-clone run read one)."""
    daemonsets = json.loads(lab.kubectl("get", "ds", "-n", "gpu-operator", "-o", "json", check=True).stdout)
    owner_of, ds_image = {}, {}
    for ds in daemonsets["items"]:
        ds_image[ds["metadata"]["name"]] = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        refs = ds["metadata"].get("ownerReferences") or []
        owner_of[ds["metadata"]["name"]] = next(
            (f"{r['kind']}/{r['name']}" for r in refs if r["kind"] in ("ClusterPolicy", "NVIDIADriver")), None)
    pods = json.loads(lab.kubectl("get", "pods", "-n", "gpu-operator", "-l", DRIVER_PODS, "-o", "json",
                                  check=True).stdout)
    found: dict[str, dict[str, Any]] = {}
    for pod in pods["items"]:
        if not pod["spec"].get("nodeName"):
            continue  # created by its DaemonSet, not yet bound by the scheduler: on no node yet
        ds = next(r["name"] for r in pod["metadata"]["ownerReferences"] if r["kind"] == "DaemonSet")
        statuses = pod["status"].get("containerStatuses") or [{}]
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        found[pod["spec"]["nodeName"]] = {
            "image": pod["spec"]["containers"][0]["image"], "owner": owner_of.get(ds), "ds_image": ds_image.get(ds),
            "state": waiting.get("reason") or pod["status"].get("phase")}
    return found


def check_json(lab: Lab, *args: str) -> tuple[int, dict[str, Any], str]:
    res = lab.cli("check", "-o", "json", *args)
    return res.code, (json.loads(res.out) if res.out.strip() else {}), res.err


def token_kubeconfig(lab: Lab, path: Any, namespace: str, account: str) -> None:
    """A kubeconfig holding a ServiceAccount's token: requests run with exactly that account's RBAC."""
    token = subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "create", "token",
                            account, "-n", namespace], capture_output=True, text=True, check=True).stdout.strip()
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n"
        f"    server: {lab.apiserver}\n    certificate-authority: {lab.state_dir / 'pki' / 'ca.crt'}\n"
        f"users:\n- name: sa\n  user:\n    token: {token}\n"
        "contexts:\n- name: sa\n  context: {cluster: lab, user: sa}\ncurrent-context: sa\n")
