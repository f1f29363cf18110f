"""The seed's story on Debian 12, with NVIDIA's real GPU Operator (NVIDIADriver mode, 535, precompiled) deploying the
drivers and the lab loading each image's modules as the node's kernel would (lab/kernel_load.py):

a node joins on 6.1.0-50-amd64 (Debian's security update) -> the operator's pod cannot pull its image -> check names
it, action build -> `gpualign ensure` builds NVIDIA's real modules against that kernel, verifies and pushes them ->
the operator's pod loads them -> a mis-tagged push (6.1.0-50's image under 6.1.0-47's tag) is seen by check before
anything restarts, and the next driver pod on a 6.1.0-47 node crash-loops with the kernel's CRC refusal.

The fleet's own images are the lab's synthetic ones (no modules: tag-only, seeded without a compile); the one real
build is 6.1.0-50-amd64's, which test_ensure_build.py makes too (cached by kernel, built once per machine)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.operator import check_json, operator_driver_pods, wait_operator_pod
from tests.support.waits import pod_events, wait_for

pytestmark = pytest.mark.lab

FLEET = {"deb-a1": "6.1.0-47-amd64", "deb-a2": "6.1.0-47-amd64", "deb-c1": "6.1.0-47-cloud-amd64"}
NEW_KERNEL = "6.1.0-50-amd64"
NEW_TAG = f"535-{NEW_KERNEL}-debian12"
DRIVER_PODS = "app.kubernetes.io/component=nvidia-driver"


def restart_driver_pod(lab, node: str) -> None:
    """A reboot or an eviction, as far as the driver is concerned: its pod is deleted, the DaemonSet makes another."""
    deleted = lab.kubectl("delete", "pod", "-n", "gpu-operator", "--field-selector", f"spec.nodeName={node}", "-l",
                          DRIVER_PODS)
    assert deleted.returncode == 0, deleted.stderr


def driver_container(kube, node: str) -> tuple[dict | None, dict]:
    """The node's operator driver pod (None before it exists) and its first container's status ({} before any)."""
    pods = [p for p in kube.pods("gpu-operator", label_selector=DRIVER_PODS) if p["spec"].get("nodeName") == node]
    statuses = (pods[0].get("status") or {}).get("containerStatuses") or [] if pods else []
    return (pods[0] if pods else None), (statuses[0] if statuses else {})


@pytest.fixture(scope="module")
def deblab(tmp_path_factory):
    lab = start_lab(tmp_path_factory.mktemp("op-deb") / "state", "operator-debian")
    yield lab
    run_cli("lab", "down", env=lab.env)


def test_the_operator_deploys_the_debian12_precompiled_tags_and_check_names_them_byte_for_byte(deblab):
    pods = wait_for(lambda: (p := operator_driver_pods(deblab)) and len(p) == len(FLEET) and p, timeout=60,
                    what="the operator's driver pods on the Debian fleet")
    code, data, err = check_json(deblab)  # no flag: the operator's NVIDIADriver says branch, repository, OS tags
    assert code == 0, err
    assert data["operator"]["mode"] == "nvidiadriver"
    by_name = {n["name"]: n for n in data["nodes"]}
    assert set(by_name) == set(FLEET)
    for node, kernel in FLEET.items():
        assert pods[node]["owner"] == "NVIDIADriver/debian"
        assert pods[node]["image"] == f"{deblab.registry}/nvidia/driver:535-{kernel}-debian12"  # what it computes
        assert by_name[node]["image"] == pods[node]["image"], node  # byte for byte
        assert by_name[node]["status"] == "present" and pods[node]["state"] == "Running"


@pytest.mark.timeout(1800)  # cold: a bookworm build root and a real compile, unless test_ensure_build made them
def test_a_node_joins_on_the_security_update_ensure_builds_it_the_operator_loads_it_a_mistag_crash_loops(deblab,
                                                                                                     tmp_path):
    lab = deblab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    selector = ("-l", "kubernetes.io/hostname=deb-n1")
    added = lab.cli("lab", "add-node", "deb-n1", "--kernel", NEW_KERNEL, "--os", "debian12", "--label", "pool=debian")
    assert added.code == 0, added.err

    # 1. the operator deploys it at once, and its pod cannot pull: no alarm rings but check's
    pod = wait_operator_pod(lab, "deb-n1", ("ImagePullBackOff", "ErrImagePull"))
    assert pod["image"] == f"{lab.registry}/nvidia/driver:{NEW_TAG}"
    code, data, err = check_json(lab, *selector)
    (node,) = data["nodes"]
    assert code == 1 and node["status"] == "missing" and node["image"] == pod["image"], err
    (missing,) = data["missing"]
    assert (missing["tag"], missing["action"]) == (NEW_TAG, "build")

    # 2. ensure builds it from check's own report: real modules, verified against 6.1.0-50's Module.symvers
    (tmp_path / "check.json").write_text(json.dumps(data))
    built = lab.cli("ensure", "--from", str(tmp_path / "check.json"), "--ledger", ledger, "-o", "json", timeout=1700)
    assert built.code == 0, built.out + built.err
    (image,) = json.loads(built.out)["images"]
    assert image["tag"] == NEW_TAG and image["done"] and image["verification"]["ok"]
    assert image["verification"]["symbols_checked"] > 700

    # 3. the operator's pod (the same one: its kubelet retries the pull) loads the modules; check is clean
    wait_for(lambda: operator_driver_pods(lab)["deb-n1"]["state"] == "Running", timeout=90,
             what="deb-n1's operator pod Running on the built image")
    driver = kube.get("/api/v1/nodes/deb-n1")["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
    assert driver == image["verification"]["driver_version"]  # the version inside the modules, not the tag's
    deep = lab.cli("check", "--verify-modules", *selector)
    assert deep.code == 0, deep.out + deep.err

    # 4. a CI job pushes 6.1.0-50's image under 6.1.0-47-amd64's tag. Nothing restarted yet, and check sees it
    wrong = "535-6.1.0-47-amd64-debian12"
    copied = subprocess.run(["skopeo", "copy", "--all", "--src-tls-verify=false", "--dest-tls-verify=false",
                             f"docker://{lab.registry}/nvidia/driver:{NEW_TAG}",
                             f"docker://{lab.registry}/nvidia/driver:{wrong}"], capture_output=True, text=True)
    assert copied.returncode == 0, copied.stderr
    code, data, err = check_json(lab, "--verify-modules")
    by_name = {n["name"]: n for n in data["nodes"]}
    assert code == 1 and data["summary"]["wrong_image"] == 2, err
    assert {n for n, f in by_name.items() if f["status"] == "wrong-image"} == {"deb-a1", "deb-a2"}
    assert re.search(r"its modules would not load on 6\.1\.0-47-amd64: nvidia[-a-z]*: disagrees about version "
                     r"of symbol \w+", by_name["deb-a1"]["reason"]), by_name["deb-a1"]["reason"]
    assert by_name["deb-c1"]["status"] == by_name["deb-n1"]["status"] == "present"

    # 5. deb-a1's driver pod restarts (a reboot, an eviction): its replacement pulls the tag and crash-loops with
    #    the kernel's refusal, in its status, an Event, and gpualign's status
    before = operator_driver_pods(lab)["deb-a1"]
    restart_driver_pod(lab, "deb-a1")

    def crashing() -> dict | None:
        pod, status = driver_container(kube, "deb-a1")
        return pod if ((status.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff" else None

    crashed = wait_for(crashing, timeout=90, what="deb-a1's new operator pod crash-looping")
    assert crashed["spec"]["containers"][0]["image"] == before["image"]
    message = crashed["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"]
    assert message.startswith("insmod: ERROR: could not insert module ") and ": Invalid parameters; " in message
    assert re.search(r"disagrees about version of symbol \w+ \(module 0x[0-9a-f]+, kernel 6\.1\.0-47-amd64 "
                     r"0x[0-9a-f]+\)", message), message
    events = pod_events(kube, crashed, "BackOff")
    assert "driver modules refused by the node's kernel" in events[0]["message"]
    status = lab.cli("status", "-o", "json")
    row = next(r for r in json.loads(status.out)["nodes"] if r["name"] == "deb-a1")
    assert row["stuck"] and "is CrashLoopBackOff" in row["no_driver"], row
    assert "it exited saying: insmod: ERROR: could not insert module" in row["no_driver"]  # why names the cause
    # deb-a2 loaded its (synthetic) image before the push and keeps running; deb-c1's tag was not touched
    assert operator_driver_pods(lab)["deb-a2"]["state"] == operator_driver_pods(lab)["deb-c1"]["state"] == "Running"

    # 6. the pool asks for open kernel modules (kernelModuleType: open): the operator gives its pods
    #    KERNEL_MODULE_TYPE=open. deb-n1's image holds proprietary ones: check says so before anything restarts, and
    #    names why gpualign cannot build open ones for bookworm; the next pod is refused by the image's own init
    patched = lab.kubectl("patch", "nvidiadriver", "debian", "--type", "merge", "-p",
                          '{"spec":{"kernelModuleType":"open"}}')
    assert patched.returncode == 0, patched.stderr
    try:
        def open_asked() -> bool:
            ds = [d for d in kube.get("/apis/apps/v1/namespaces/gpu-operator/daemonsets")["items"]
                  if d["metadata"]["name"].startswith("nvidia-gpu-driver-debian12")]
            return bool(ds) and all({"name": "KERNEL_MODULE_TYPE", "value": "open"} in
                                    d["spec"]["template"]["spec"]["containers"][0].get("env", []) for d in ds)

        wait_for(open_asked, timeout=60, what="the operator's DaemonSets asking for open modules")
        code, data, err = check_json(lab, *selector)
        (node,) = data["nodes"]
        assert code == 1 and node["status"] == "wrong-image" and node["modules"] == "open", err
        assert "it holds proprietary kernel modules, and the GPU Operator's pod here loads open (kernelModuleType: " \
               "open)" in node["reason"]
        assert "open kernel modules of NVIDIA 535 are 535.261.03, its user space 535.309.01" in node["reason"]
        restart_driver_pod(lab, "deb-n1")

        def refused() -> str | None:
            _pod, status = driver_container(kube, "deb-n1")
            return ((status.get("lastState") or {}).get("terminated") or {}).get("message")

        message = wait_for(refused, timeout=90, what="deb-n1's new pod refused by the image's init")
        assert message.startswith("gpualign: driver image 535-6.1.0-50-amd64 holds NVIDIA's proprietary kernel "
                                  "modules; this pod asks for open (KERNEL_MODULE_TYPE=open): refusing to load"), \
            message
    finally:
        restored = lab.kubectl("patch", "nvidiadriver", "debian", "--type", "merge", "-p",
                               '{"spec":{"kernelModuleType":"auto"}}')
        assert restored.returncode == 0, restored.stderr


@pytest.mark.timeout(300)
def test_debians_plus_kernels_are_labelled_as_nfd_does_and_named_as_the_operator_names_them(deblab):
    """Debian's current kernels: 6.12 on Debian 12 (bookworm-security) and Debian 13. NFD labels the release's `+`
    as `_`; the kubelet reports the release. The real operator names the image from the label, and check names the
    same tag byte for byte. What the operator makes for a Debian 13 node, in this pinned version: no DaemonSet."""
    lab = deblab
    kube = lab.kube()
    for name, kernel, os_ in (("deb-612", "6.12.117+deb12-amd64", "debian12"),
                              ("deb-13", "6.12.118+deb13-amd64", "debian13")):
        added = lab.cli("lab", "add-node", name, "--kernel", kernel, "--os", os_, "--label", "pool=debian")
        assert added.code == 0, added.err
        node = kube.get(f"/api/v1/nodes/{name}")
        assert node["metadata"]["labels"]["feature.node.kubernetes.io/kernel-version.full"] == \
            kernel.replace("+", "_")
        assert node["status"]["nodeInfo"]["kernelVersion"] == kernel
    pods = wait_for(lambda: (p := operator_driver_pods(lab)) and "deb-612" in p and p, timeout=120,
                    what="the operator's driver pod on the 6.12 node")
    tag = "535-6.12.117_deb12-amd64-debian12"
    assert pods["deb-612"]["image"] == f"{lab.registry}/nvidia/driver:{tag}"  # the label, `_` and all
    code, data, err = check_json(lab, "-l", "kubernetes.io/hostname in (deb-612,deb-13)")
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["deb-612"]["image"] == pods["deb-612"]["image"]  # byte for byte
    assert by_name["deb-612"]["status"] == "missing"
    assert by_name["deb-13"]["tag"] == "535-6.12.118_deb13-amd64-debian13" and by_name["deb-13"]["status"] == "missing"
    # the pinned operator may render no DaemonSet for the Debian 13 pool (it logs the node pool and stops there; a
    # fresh lab shows that), or one, after other pools changed: check says which, in its words
    pods = operator_driver_pods(lab)
    code, data, err = check_json(lab, "-l", "kubernetes.io/hostname in (deb-612,deb-13)")
    by_name = {n["name"]: n for n in data["nodes"]}
    if "deb-13" in pods:
        assert by_name["deb-13"]["image"] == pods["deb-13"]["image"]  # byte for byte, `_` and all
        assert "made no driver DaemonSet" not in by_name["deb-13"]["reason"]
    else:
        assert "the GPU Operator made no driver DaemonSet for this node" in by_name["deb-13"]["reason"]
    assert "made no driver DaemonSet" not in by_name["deb-612"]["reason"]
    # the pool's NVIDIADriver asks for 535; Debian 13's archive carries 550 (gpualign builds that): said, not built
    assert by_name["deb-13"]["action"] == "none"
    assert "Debian trixie carries NVIDIA 535 only as nvidia-tesla-535-kernel-source" in \
        by_name["deb-13"]["action_reason"]
    # ensure says the same as check's ACTION, in one line, for each
    for node in ("deb-612", "deb-13"):
        res = lab.cli("ensure", by_name[node]["tag"], "--ledger", f"registry://{lab.registry}/nvidia/driver",
                      "--dry-run", timeout=120)
        if by_name[node]["action"] == "none":
            assert res.code == 2 and by_name[node]["action_reason"] in res.err, (node, res.err)
        else:
            assert res.code == 0 and f"would {by_name[node]['action']}" in res.out, (node, res.out, res.err)
    for name in ("deb-612", "deb-13"):  # the fleet as the other tests expect it
        kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.mark.timeout(1800)  # cold: the arm64 cross-compile, which test_ensure_build.py makes too (cached)
def test_an_arm64_node_gets_the_operators_pod_and_that_pod_loads_the_arm64_image_gpualign_built(deblab):
    """A Grace Hopper node on Debian 12's arm64 kernel, as NFD labels it: the real operator deploys its precompiled
    tag, the pod cannot pull, check says build, ensure builds it across and pushes an index naming linux/arm64, and
    the operator's pod (its kubelet retrying the pull, for its node's platform) loads the arm64 modules."""
    lab = deblab
    kernel = "6.1.0-50-arm64"
    tag = f"535-{kernel}-debian12"
    added = lab.cli("lab", "add-node", "gh-1", "--kernel", kernel, "--os", "debian12", "--arch", "arm64",
                    "--label", "pool=debian")
    assert added.code == 0, added.err
    try:
        pod = wait_operator_pod(lab, "gh-1", ("ImagePullBackOff", "ErrImagePull"))
        assert pod["image"] == f"{lab.registry}/nvidia/driver:{tag}"
        code, data, err = check_json(lab, "-l", "kubernetes.io/hostname=gh-1")
        (missing,) = data["missing"]
        assert code == 1 and (missing["tag"], missing["action"]) == (tag, "build"), err
        built = lab.cli("ensure", tag, "--ledger", f"registry://{lab.registry}/nvidia/driver", "-o", "json",
                        timeout=1700)
        assert built.code == 0, built.out + built.err
        (image,) = json.loads(built.out)["images"]
        assert image["verification"]["ok"] and image["verification"]["kernel"] == kernel
        wait_for(lambda: operator_driver_pods(lab)["gh-1"]["state"] == "Running", timeout=90,
                 what="gh-1's operator pod Running on the arm64 image")
        deep = lab.cli("check", "--verify-modules", "-l", "kubernetes.io/hostname=gh-1")
        assert deep.code == 0, deep.out + deep.err  # its modules, read for arm64, fit the node's kernel
    finally:
        lab.kube().request("DELETE", "/api/v1/nodes/gh-1")
