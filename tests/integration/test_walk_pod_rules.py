"""The walk evicts only what `kubectl drain` would: a pod with no controller (lost for good once deleted) holds its
node uncordoned, named, until --force; with it, the walk goes through and the pod is evicted, as `kubectl drain
--force` would. The real API server, scheduler and PDB logic; kwok plays the node."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import pod_ready, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

POOL = "6.8.0-48-generic-ubuntu24.04"  # the default scenario's gpu-b1 pool


@pytest.fixture(scope="module")
def plab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("podrules") / "state")
    assert lab.cli("lab", "push-image", f"595-{POOL}").code == 0
    assert lab.cli("lab", "add-node", "gpu-bare", "--kernel", "6.8.0-48-generic", "--os", "ubuntu24.04",
                   "--branch", "580", "--driver", "580.95.05").code == 0
    yield lab
    run_cli("lab", "down", env=lab.env)


def bare_pod(kube, node: str, name: str, *, empty_dir: bool = False) -> dict:
    spec: dict = {"nodeSelector": {"kubernetes.io/hostname": node},
                  "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base",
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    return wait_for(lambda: (p := kube.get(f"/api/v1/namespaces/default/pods/{name}")) and pod_ready(p) and p,
                    timeout=60, what=f"{name} Ready on {node}")


@pytest.mark.timeout(300)
def test_a_pod_without_a_controller_holds_its_node_uncordoned_until_force(plab):
    lab = plab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    selector = ("-l", "kubernetes.io/hostname=gpu-bare")
    pod = bare_pod(kube, "gpu-bare", "gpujob")

    dry = lab.cli("upgrade", *selector, "--to-branch", "595", "--ledger", ledger, "--dry-run")
    assert dry.code == 1, dry.out + dry.err
    assert "gpu-bare stays upgrade-required: default/gpujob has no controller" in dry.out, dry.out

    walk = lab.cli("upgrade", *selector, "--to-branch", "595", "--ledger", ledger, "--yes", timeout=120)
    assert walk.code == 1, walk.out + walk.err
    node = kube.get("/api/v1/nodes/gpu-bare")
    assert not node["spec"].get("unschedulable")  # never cordoned
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required"
    blocker = node["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
    assert blocker.startswith("held before cordon: default/gpujob has no controller: deleting it loses it for good")
    assert "--force (podDeletion.force)" in blocker
    still = kube.get("/api/v1/namespaces/default/pods/gpujob")
    assert still is not None and still["metadata"]["uid"] == pod["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")
    assert "gpu-bare (upgrade-required): held before cordon: default/gpujob" in walk.out

    forced = lab.cli("upgrade", *selector, "--to-branch", "595", "--ledger", ledger, "--yes", "--force",
                     timeout=180)
    assert forced.code == 0, forced.out + forced.err
    assert "evicted default/gpujob" in forced.err
    node = kube.get("/api/v1/nodes/gpu-bare")
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    assert not node["spec"].get("unschedulable")
    assert "gpualign.io/upgrade-blocker" not in node["metadata"]["annotations"]
    wait_for(lambda: kube.get("/api/v1/namespaces/default/pods/gpujob") is None, timeout=30, what="gpujob evicted")


@pytest.mark.timeout(300)
def test_the_preview_shows_the_pods_of_a_node_whose_image_is_missing(plab):
    """The review's #19: a node whose new image is not in the ledger yet showed "0 pod(s) to evict" though GPU work
    ran there: a maintenance plan made from that preview missed its real blockers."""
    lab = plab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    bare_pod(kube, "gpu-a1", "gpujob-a1")  # gpu-a1's 595 image is not pushed in this lab
    dry = lab.cli("upgrade", "-l", "kubernetes.io/hostname=gpu-a1", "--to-branch", "595", "--ledger", ledger,
                  "--dry-run")
    assert dry.code == 1, dry.out + dry.err
    line = next(ln for ln in dry.out.splitlines() if ln.strip().startswith("gpu-a1:"))
    assert "image missing" in line and "default/gpujob-a1" in line, dry.out
    assert "gpu-a1 stays upgrade-required: image missing" in dry.out


@pytest.mark.timeout(300)
def test_a_restart_in_place_cordons_evicts_nothing_and_keeps_the_gpu_work(plab):
    """GPU Operator v26's restart in place, walked by gpualign: the driver pod and its DaemonSet carry the same
    DRIVER_CONFIG_DIGEST and only a chart label moved, so the node is cordoned, its driver pod restarted, and a GPU
    pod no drain could move (it has no controller) keeps running."""
    from gpualign.lab.seed import DRIVER_NAMESPACE, daemonset_name
    from gpualign.model.driver_config import RESTART_IN_PLACE

    lab, kube = plab, plab.kube()
    kernel = "6.8.0-51-generic"
    assert lab.cli("lab", "push-image", f"580-{kernel}-ubuntu24.04").code == 0
    assert lab.cli("lab", "add-node", "gpu-cfg", "--kernel", kernel, "--os", "ubuntu24.04", "--branch", "580",
                   "--driver", "580.95.05").code == 0
    path = f"/apis/apps/v1/namespaces/{DRIVER_NAMESPACE}/daemonsets/{daemonset_name(kernel, 'ubuntu24.04')}"

    def driver_pod() -> dict | None:
        pods = kube.pods(DRIVER_NAMESPACE, field_selector="spec.nodeName=gpu-cfg")
        return next((p for p in pods if not p["metadata"].get("deletionTimestamp")), None)

    # the operator of v26 renders the digest into its driver containers; the pod running now was made from that
    containers = kube.get(path)["spec"]["template"]["spec"]["containers"]
    containers[0]["env"] = [{"name": "DRIVER_CONFIG_DIGEST", "value": "2864711503"}]
    kube.patch(path, {"spec": {"template": {"spec": {"containers": containers}}}})
    old = wait_for(driver_pod, timeout=60, what="gpu-cfg's driver pod")
    kube.request("DELETE", f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods/{old['metadata']['name']}")
    wait_for(lambda: (p := driver_pod()) and p["metadata"]["uid"] != old["metadata"]["uid"] and pod_ready(p),
             timeout=60, what="gpu-cfg's driver pod made with the digest")
    gpujob = bare_pod(kube, "gpu-cfg", "gpujob-cfg")
    kube.patch(path, {"spec": {"template": {"metadata": {"labels": {"helm.sh/chart": "gpu-operator-v26.7.1"}}}}})

    walk = lab.cli("upgrade", "-l", "kubernetes.io/hostname=gpu-cfg", "--ledger",
                   f"registry://{lab.registry}/nvidia/driver", "--yes", timeout=180)
    assert walk.code == 0, walk.out + walk.err
    assert f"upgrade-required → pod-restart-required: admitted and cordoned: {RESTART_IN_PLACE}" in walk.err, walk.err
    assert "evicted default/gpujob-cfg" not in walk.err
    node = kube.get("/api/v1/nodes/gpu-cfg")
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    assert not node["spec"].get("unschedulable")
    still = kube.get("/api/v1/namespaces/default/pods/gpujob-cfg")
    assert still is not None and still["metadata"]["uid"] == gpujob["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")

