"""The image `gpualign ensure` builds, started by the GPU Operator's own driver container spec on the lab's real node.

The real node is labelled as the operator selects a Debian 12 GPU node on 6.1.0-50-amd64, so the real operator
renders its driver DaemonSet for that kernel, naming the built image. That DaemonSet's pod template runs on the real
node as the operator wrote it (command, args, environment, mounts, privileges, probes), with two changes, both
because the lab is offline: its init container (NVIDIA's k8s-driver-manager, whose image is not reachable here; on a
node with no driver loaded it has nothing to evict or unload) is left out, and the node's own taint is tolerated.

The node's kernel is not the image's, so `nvidia-driver init` must run to gpualign's kernel check and stop there in
one line. No GPU exists here, and none is faked: what runs without a driver is run (usage, the peermem probe,
`nvidia-smi -h`, the library set); loading into a GPU node's Debian 6.1 kernel is what this cannot show.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from gpualign.lab import driver_pod, realnode
from tests.support.cli import run_cli
from tests.support.lab import Lab, start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
KERNEL = "6.1.0-50-amd64"
TAG = f"535-{KERNEL}-debian12"
NS = "gpu-operator"
SELECTED_AS = {**driver_pod.selected_as(KERNEL, "debian", "12"), "pool": "debian"}  # pool: the NVIDIADriver's


@pytest.fixture(scope="module")
def oplab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    state_dir = tmp_path_factory.mktemp("dropin") / "state"
    lab = start_lab(state_dir, "operator-debian", real_node=True)
    try:
        yield lab
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})


def operator_template(lab: Lab) -> dict:
    """The pod template of the operator's DaemonSet for KERNEL, once the operator has rendered it. A node label
    change starts an operator pass at once (any other pass may be two minutes away): should the first pass miss it
    (an operator still starting on a loaded machine), the node's label is touched again every 30 s. On a timeout the
    operator's own log says why."""
    kube = lab.kube()
    touched = [time.monotonic()]

    def rendered() -> dict | None:
        for ds in kube.get_json(f"/apis/apps/v1/namespaces/{NS}/daemonsets")["items"]:
            selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
            if selector.get("feature.node.kubernetes.io/kernel-version.full") == KERNEL:
                return ds
        if time.monotonic() - touched[0] > 30:
            kube.patch(f"/api/v1/nodes/{realnode.NAME}", {"metadata": {"labels": {"lab/nudge": str(int(time.time()))}}})
            touched[0] = time.monotonic()
        return None

    try:
        return wait_for(rendered, timeout=240, what=f"the operator's driver DaemonSet for {KERNEL}")
    except AssertionError as err:
        log = (lab.state_dir / "logs" / "gpu-operator.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"{err}\nthe operator's log ends:\n{log}") from None


def container_log(lab: Lab, pod: str, container: str) -> str | None:
    """The log of a finished instance of a container that restarts: every instance prints the same. kubelet keeps
    one dead instance per container, so `--previous` may name one already removed ("unable to retrieve container
    logs"); then the latest instance, which is the finished one while the container waits to restart."""
    for previous in (("--previous",), ()):
        out = lab.kubectl("logs", "-n", NS, pod, "-c", container, *previous).stdout or ""
        if out.strip() and not out.startswith("unable to retrieve container logs"):
            return out
    return None


@pytest.mark.timeout(2400)  # cold: NVIDIA's modules compiled once (cached for every later build)
def test_the_operators_own_driver_container_starts_the_built_image_and_stops_at_the_kernel_check(oplab):
    lab = oplab
    kube = lab.kube()
    built = lab.cli("ensure", TAG, "--ledger", f"registry://{lab.registry}/nvidia/driver", timeout=2000)
    assert built.code == 0, built.out + built.err
    kube.patch(f"/api/v1/nodes/{realnode.NAME}", {"metadata": {"labels": SELECTED_AS}})
    template = operator_template(lab)
    ctr = template["spec"]["template"]["spec"]["containers"][0]
    assert ctr["name"] == "nvidia-driver-ctr" and ctr["image"] == f"{lab.registry}/nvidia/driver:{TAG}"
    assert ctr["command"] == ["nvidia-driver"] and ctr["args"] == ["init"]
    host = os.uname().release
    before = {p for p in driver_pod.HOST_PATHS if os.path.lexists(p)}
    with driver_pod.host_prepared():
        pod = driver_pod.pod_for(template["spec"]["template"], "driver-init", NS)
        started = time.monotonic()
        assert kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod).status_code == 201

        def terminated() -> dict | None:
            got = kube.get(f"/api/v1/namespaces/{NS}/pods/driver-init") or {}
            for status in (got.get("status") or {}).get("containerStatuses") or []:
                term = (status.get("state") or {}).get("terminated") or \
                    (status.get("lastState") or {}).get("terminated")
                if term:
                    return term
            return None

        term = wait_for(terminated, timeout=120, what="nvidia-driver init to stop on the real node")
        took = time.monotonic() - started
        logs = wait_for(lambda: container_log(lab, "driver-init", "nvidia-driver-ctr"), timeout=60,
                        what="a log of nvidia-driver init")
        ran = kube.get(f"/api/v1/namespaces/{NS}/pods/driver-init")
        assert ran is not None
        kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/driver-init", params={"gracePeriodSeconds": "0"})

        # the contract's other commands, in the same spec, where no driver is loaded
        probe = driver_pod.pod_for(template["spec"]["template"], "driver-contract", NS, restartPolicy="Never")
        probe["spec"]["containers"][0].pop("startupProbe", None)
        probe["spec"]["containers"][0]["command"] = ["sh", "-c"]
        probe["spec"]["containers"][0]["args"] = [
            "nvidia-driver; echo usage=$?; nvidia-driver probe_nvidia_peermem; echo probe=$?; "
            "nvidia-smi -h | head -n 1; nvidia-smi; echo smi=$?; "
            "ldconfig -p | grep -E 'lib(cuda|nvidia-ml|nvidia-ptxjitcompiler|nvidia-cfg)\\.so\\.1 ' | sort; "
            "nvidia-persistenced --version | grep version"]
        assert kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body=probe).status_code == 201
        wait_for(lambda: ((kube.get(f"/api/v1/namespaces/{NS}/pods/driver-contract") or {}).get("status") or {})
                 .get("phase") in ("Succeeded", "Failed"), timeout=120, what="the contract pod")
        contract = lab.kubectl("logs", "-n", NS, "driver-contract").stdout
        kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/driver-contract", params={"gracePeriodSeconds": "0"})
        wait_for(lambda: not kube.get_json(f"/api/v1/namespaces/{NS}/pods",
                                           params={"labelSelector": "gpualign.io/test=dropin"})["items"],
                 timeout=60, what="the test's pods gone")

    # it ran the operator's command in the operator's mounts and environment, and refused at the kernel check
    c = ran["spec"]["containers"][0]
    mounts = [m for m in c["volumeMounts"] if not m["name"].startswith("kube-api-access-")]  # the token, added
    assert (c["command"], c["args"], c["env"], mounts, c["securityContext"]) == (
        ctr["command"], ctr["args"], ctr["env"], ctr["volumeMounts"], ctr["securityContext"])
    assert term["exitCode"] == 1, term
    lines = [ln for ln in logs.splitlines() if ln.strip()]
    refusal = (f"gpualign: driver image 535-{KERNEL} holds NVIDIA 535.309.01 modules built and verified for kernel "
               f"{KERNEL}; this node runs {host}: refusing to load (the kernel would refuse them: version magic "
               "and symbol CRCs differ)")
    # all it printed: NVIDIA's banner (stdout) and the refusal (stderr); the log may interleave the two streams
    banner = ["========== NVIDIA Software Installer ==========",
              f"Starting installation of NVIDIA driver branch 535 for Linux kernel version {host}"]
    assert sorted(lines) == sorted([*banner, refusal]), logs
    assert not any("Unloading" in ln or "Loading" in ln for ln in lines)  # nothing loaded was touched
    print(f"operator pod created -> refusal: {took:.1f}s")

    # the same through `gpualign lab run-driver`, which the demo uses
    via = json.loads(lab.cli("lab", "run-driver", TAG, "-o", "json", timeout=300).out)
    assert via["source"].startswith("the GPU Operator's DaemonSet gpu-operator/") and via["exitCode"] == 1
    assert via["command"] == ["nvidia-driver"] and via["args"] == ["init"]
    assert sorted(ln for ln in via["log"] if ln.strip()) == sorted([*banner, refusal])
    assert driver_pod.leftovers(before) == []

    assert "usage=1" in contract and "probe=0" in contract, contract
    assert "MOFED drivers are not ready, skipping probe" in contract
    assert "NVIDIA System Management Interface -- v535.309.01" in contract
    assert "couldn't communicate with the NVIDIA driver" in contract and "smi=9" in contract
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-cfg.so.1"):
        assert soname in contract, soname
    assert "nvidia-persistenced:  version" in contract
