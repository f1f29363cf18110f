"""Kernel to GPU with nobody typing, on the lab's real node: the chart's controller (builds.enabled) sees Debian GPU
nodes join on a kernel whose driver image is missing, starts one build Job, the Job runs gpualign's builder image on
the real node (privileged, hostNetwork: the lab's registry and API server listen on 127.0.0.1), takes the modules
another builder compiled from the registry (checked, then verified against the kernel as if compiled here), makes
the image with NVIDIA's user space, pushes it, and the nodes' driver pods come up. No command after the nodes join.

Also on the real node: the controller SIGKILLed while its Job runs is restarted by the kubelet and adopts the Job
(no second one); a kernel Debian has no headers for fails once, permanently, with the reason in an Event on the
waiting node, and is tried again only after `gpualign build retry`.

An arm64 node joins too: its Job runs on the amd64 real node and compiles across (here: takes the shared arm64
modules), and the node's driver pod loads the arm64 image.

The modules are NVIDIA's real ones for 6.1.0-50-amd64 (and -arm64), compiled once on the machine (cached; a cold machine
compiles them here, or waits for test_ensure_build's compile under the same lock) and pushed as the shared artifact
a first builder would have left: the build Job starts on an empty disk and compiles nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpualign.archive.apt import Archive
from gpualign.controller.build_trigger import job as J
from gpualign.ensure import debian, shared
from gpualign.lab import realnode, versions
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from tests.support.cli import ROOT, run_cli
from tests.support.lab import Lab, start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
CHART = ROOT / "charts" / "gpualign"
NS = "gpualign-system"
BUILDS = "gpualign-builds"  # the chart's build namespace: the Jobs and their pods run there
KERNEL = "6.1.0-50-amd64"
TAG = f"535-{KERNEL}-debian12"
NO_HEADERS = "6.1.0-9999-amd64"  # a kernel Debian has never published


ARM64_KERNEL = "6.1.0-50-arm64"  # a Grace Hopper node's: its image is compiled across on the (amd64) real node
ARM64_TAG = f"535-{ARM64_KERNEL}-debian12"


@pytest.fixture(scope="module")
def compiled() -> debian.Built:
    return debian.compile_modules(Archive(), KERNEL, jobs=2)


@pytest.fixture(scope="module")
def compiled_arm64() -> debian.Built:
    return debian.compile_modules(Archive.for_kernel(ARM64_KERNEL), ARM64_KERNEL, jobs=2)


@pytest.fixture(scope="module")
def blab(tmp_path_factory: pytest.TempPathFactory, compiled: debian.Built,
         compiled_arm64: debian.Built) -> Iterator[Lab]:
    state_dir = tmp_path_factory.mktemp("unattended") / "state"
    lab = start_lab(state_dir, "empty", real_node=True)
    try:
        pushed = lab.cli("lab", "push-self", "--builder", timeout=600)
        assert pushed.code == 0, pushed.err
        # the ledger's repository exists, holding nothing these nodes need
        assert lab.cli("lab", "push-image", "580-5.15.0-124-generic-ubuntu22.04").code == 0
        reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=60.0)
        shared.push(reg, shared.Key(compiled.driver_version, KERNEL, "proprietary"), compiled.modules)
        shared.push(reg, shared.Key(compiled_arm64.driver_version, ARM64_KERNEL, "proprietary"),
                    compiled_arm64.modules)
        reg.close()
        yield lab
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})


def helm(lab: Lab, *args: str) -> None:
    proc = subprocess.run([str(versions.helm_binary()), *args, "--kubeconfig", str(lab.kubeconfig)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:  # what the release's pods said, beside helm's words
        pods = lab.kubectl("get", "pods", "-n", NS, "-o", "wide").stdout
        logs = controller_log(lab)
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}\n{pods}\n{logs}")


def chart_values(lab: Lab, folder: Path, port: int | None = None) -> tuple[list[str], int]:
    """The chart's values for this module's controller (the lab's, with builds on), and its port (a free one, or
    `port`: an upgrade keeps the port the release was installed with)."""
    values = lab.cli("lab", "chart-values")
    assert values.code == 0, values.err
    path = folder / "values.yaml"
    path.write_text(values.out)
    port = port or YAML(typ="safe").load(values.out)["servicePort"]
    return (["-f", str(path), "--set", f"servicePort={port}", "--set", "builds.enabled=true",
             "--set", "builds.retryAfterSeconds=5", "--set", "ledgerRefreshSeconds=2"], port)


@pytest.fixture(scope="module")
def controller(blab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    values, port = chart_values(blab, tmp_path_factory.mktemp("values"))
    helm(blab, "install", "ga", str(CHART), "-n", NS, "--create-namespace", *values, "--wait", "--timeout", "180s")
    try:
        yield port
    finally:
        subprocess.run([str(versions.helm_binary()), "uninstall", "ga", "-n", NS, "--wait", "--kubeconfig",
                        str(blab.kubeconfig)], capture_output=True, timeout=180)


def jobs(lab: Lab, tag: str) -> list[dict]:
    return [j for j in lab.kube().list_raw(f"/apis/batch/v1/namespaces/{BUILDS}/jobs",
                                           label_selector=f"{J.BUILD_LABEL}=true")
            if j["metadata"]["annotations"][J.TAG_ANNOTATION] == tag]


def node_events(lab: Lab, node: str, reason: str) -> list[dict]:
    return [e for e in lab.kube().list_raw("/api/v1/namespaces/default/events",
                                           field_selector=f"involvedObject.name={node}") if e["reason"] == reason]


def ready(pod: dict | None) -> bool:
    return bool(pod) and any(c["type"] == "Ready" and c["status"] == "True"
                             for c in (pod or {}).get("status", {}).get("conditions") or [])


def driver_pod(lab: Lab, node: str) -> dict | None:
    pods = [p for p in lab.kube().pods(label_selector="app.kubernetes.io/component=nvidia-driver")
            if p["spec"].get("nodeName") == node]
    return pods[0] if pods else None


def controller_pid(port: int) -> int:
    """The chart's controller process on the real node (its container's main process), told apart by the port this
    lab gave it."""
    found = realnode.processes_where(lambda argv: b"controller" in argv and
                                     f"--listen=127.0.0.1:{port}".encode() in argv)
    assert found, f"no controller process listening on 127.0.0.1:{port}"
    return found[0]


@pytest.mark.timeout(1500)
def test_nodes_join_on_an_unbuilt_kernel_and_their_gpus_come_up_with_nobody_typing(blab, controller, compiled):
    lab = blab
    joined = time.monotonic()
    for name in ("deb-1", "deb-2", "deb-3"):  # three nodes on one kernel
        added = lab.cli("lab", "add-node", name, "--kernel", KERNEL, "--os", "debian12", "--branch", "535")
        assert added.code == 0, added.err
    (job,) = wait_for(lambda: jobs(lab, TAG) or None, timeout=60, what="the build Job")
    created = time.monotonic() - joined
    assert job["metadata"]["annotations"][J.NODES_ANNOTATION].startswith("deb-1")  # made as the first one joined
    uid = job["metadata"]["uid"]
    selector = f"job-name={job['metadata']['name']}"
    pod = wait_for(lambda: next((p for p in lab.kube().pods(BUILDS, label_selector=selector)
                                 if (p.get("status") or {}).get("phase") == "Running"), None),
                   timeout=180, what="the build pod running")
    assert pod["spec"]["nodeName"] == realnode.NAME
    # the controller is SIGKILLed while the Job runs: the kubelet restarts it, and it adopts the Job
    os.kill(controller_pid(controller), signal.SIGKILL)
    done = wait_for(lambda: next((j for j in jobs(lab, TAG) if any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in j.get("status", {}).get("conditions")
        or [])), None), timeout=900, interval=1.0, what="the build Job finished")
    logs = lab.kubectl("logs", "-n", BUILDS, pod["metadata"]["name"], timeout=60).stdout
    print(logs)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in done["status"]["conditions"]), logs
    assert [j["metadata"]["uid"] for j in jobs(lab, TAG)] == [uid]  # one Job, adopted after the restart
    assert "shared modules: 5 pulled from" in logs and "compile:" not in logs  # nothing compiled on the disk
    assert "verified: " in logs and f"vermagic {KERNEL}" in logs
    for name in ("deb-1", "deb-2", "deb-3"):
        wait_for(lambda n=name: ready(driver_pod(lab, n)) or None, timeout=120, what=f"{name}'s driver pod Ready")
    took = time.monotonic() - joined
    reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
    labels = (reg.image_config(TAG) or {})["config"]["Labels"]
    reg.close()
    assert json.loads(labels["io.gpualign.verified"])["symbols"] > 500
    assert len(node_events(lab, "deb-1", "DriverImageBuildStarted")) == 1
    for name in ("deb-1", "deb-2", "deb-3"):  # every node that waited hears that its image landed, once the
        # restarted controller leads (the killed one never released its Lease: one lease duration)
        wait_for(lambda n=name: node_events(lab, n, "DriverImageBuilt") or None, timeout=60,
                 what=f"DriverImageBuilt on {name}")
        assert len(node_events(lab, name, "DriverImageBuilt")) == 1, name
    print(f"kernel to GPU (shared modules): {took:.1f}s; Job created after {created:.1f}s; Job from "
          f"{done['status']['startTime']} to {done['status']['completionTime']}")


@pytest.mark.timeout(900)
def test_an_arm64_node_joins_and_its_image_is_built_across_on_the_amd64_builder_with_nobody_typing(blab, controller):
    """The build Job for an arm64 kernel runs on the builder image's architecture (the real node, amd64): it takes
    the shared arm64 modules, checks them against the arm64 kernel, makes the arm64 image (its user space run under
    qemu-user) and pushes an index naming linux/arm64, which the arm64 node's driver pod loads."""
    lab = blab
    added = lab.cli("lab", "add-node", "gh-1", "--kernel", ARM64_KERNEL, "--os", "debian12", "--branch", "535",
                    "--arch", "arm64")
    assert added.code == 0, added.err
    (job,) = wait_for(lambda: jobs(lab, ARM64_TAG) or None, timeout=60, what="the arm64 build Job")
    assert job["metadata"]["annotations"][J.ARCH_ANNOTATION] == "arm64"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    done = wait_for(lambda: next((j for j in jobs(lab, ARM64_TAG) if any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in j.get("status", {}).get("conditions")
        or [])), None), timeout=800, interval=1.0, what="the arm64 build Job finished")
    pods = lab.kube().pods(BUILDS, label_selector=f"job-name={job['metadata']['name']}")
    assert pods and pods[0]["spec"]["nodeName"] == realnode.NAME
    logs = lab.kubectl("logs", "-n", BUILDS, pods[0]["metadata"]["name"], timeout=60).stdout
    print(logs)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in done["status"]["conditions"]), logs
    assert "shared modules: 5 pulled from" in logs and "compile:" not in logs
    assert f"vermagic {ARM64_KERNEL}" in logs and "(arm64)" in logs  # the arm64 user space
    reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
    index = reg.manifest(ARM64_TAG) or {}
    reg.close()
    assert [m["platform"]["architecture"] for m in index.get("manifests", [])] == ["arm64"], index
    wait_for(lambda: ready(driver_pod(lab, "gh-1")) or None, timeout=120, what="gh-1's driver pod Ready")


@pytest.mark.timeout(900)
def test_a_kernel_without_headers_fails_once_says_why_and_is_retried_only_when_asked(blab, controller):
    lab = blab
    tag = f"535-{NO_HEADERS}-debian12"
    added = lab.cli("lab", "add-node", "deb-x", "--kernel", NO_HEADERS, "--os", "debian12", "--branch", "535")
    assert added.code == 0, added.err
    failed = wait_for(lambda: node_events(lab, "deb-x", "DriverImageBuildFailed") or None, timeout=600,
                      interval=1.0, what="the failure's Event on the waiting node")
    message = failed[0]["message"]
    assert f"no headers package linux-headers-{NO_HEADERS}" in message, message
    assert "will not be retried until something changes" in message
    time.sleep(20)  # four backoffs of a passing failure (builds.retryAfterSeconds=5): a permanent one waits
    (job,) = jobs(lab, tag)
    assert job["metadata"]["annotations"][J.ATTEMPT_ANNOTATION] == "1"
    why = lab.cli("why", "deb-x", "--ledger", f"registry://{lab.registry}/nvidia/driver")
    assert f"image build failed: gpualign: error: kernel {NO_HEADERS}: no headers package" in why.out, why.out
    assert f"gpualign build retry {tag}" in why.out
    # with no flag at all (no ledger read), why still names the node's build, not only its pull failing
    plain = lab.cli("why", "deb-x")
    assert f"image build failed: gpualign: error: kernel {NO_HEADERS}: no headers package" in plain.out, plain.out
    retry = lab.cli("build", "retry", tag, "--namespace", BUILDS)
    assert retry.code == 0, retry.err
    again = wait_for(lambda: next((j for j in jobs(lab, tag)
                                   if j["metadata"]["annotations"][J.ATTEMPT_ANNOTATION] == "2"), None),
                     timeout=120, what="the second attempt, after the retry was asked")
    assert again["metadata"]["uid"] != job["metadata"]["uid"]
    # the retry is a Job of its own: the failed attempt stays, and its log with it (it was deleted before)
    assert job["metadata"]["uid"] in {j["metadata"]["uid"] for j in jobs(lab, tag)}
    first = lab.cli("build", "logs", tag, "--attempt", "1", "--namespace", BUILDS)
    assert first.code == 0, first.err
    assert f"no headers package linux-headers-{NO_HEADERS}" in first.out, first.out
    assert "attempt 1, failed" in first.err.splitlines()[0], first.err
    latest = wait_for(lambda: (r := lab.cli("build", "logs", tag, "--namespace", BUILDS)).code == 0 and r or None,
                      timeout=120, what="the second attempt's log")
    assert "attempt 2" in latest.err.splitlines()[0], latest.err
    missing = lab.cli("build", "logs", tag, "--attempt", "7", "--namespace", BUILDS)
    assert missing.code == 2 and missing.err.strip() == (
        f"gpualign: error: --attempt 7: {tag} has no such attempt in {BUILDS} (kept: 1, 2)"), missing.err


def prune(lab: Lab, tag: str) -> None:
    """A retention policy's delete of one tag (its manifest, by digest) from the ledger."""
    reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
    try:
        digest = reg.digest(tag)
        assert digest, f"{tag} is not in the ledger to prune"
        reg.delete_manifest(digest)
        assert reg.digest(tag) is None
    finally:
        reg.close()


def attempt(lab: Lab, tag: str, n: int, timeout: float) -> dict:
    """The tag's Job of attempt n, once it has finished, successfully."""
    def finished() -> dict | None:
        for j in jobs(lab, tag):
            if j["metadata"]["annotations"][J.ATTEMPT_ANNOTATION] == str(n) and any(
                    c["type"] in ("Complete", "Failed") and c["status"] == "True"
                    for c in j.get("status", {}).get("conditions") or []):
                return j
        return None

    done = wait_for(finished, timeout=timeout, interval=1.0, what=f"attempt {n} of {tag}'s build")
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in done["status"]["conditions"]), done
    return done


@pytest.mark.timeout(1500)
def test_a_pruned_image_is_built_again_for_a_joining_node_and_then_for_an_announcing_one(blab, controller):
    """Review 5: after a Job built an image and a retention policy pruned its tag, a node that joined sat in
    ImagePullBackOff beside the kept, Complete Job of attempt 1, and a node announcing the kernel
    (gpualign.io/kernel.next) got nothing built. Both orders, on the real node: the Job's success once listed, then
    gone, is a new attempt at once."""
    lab = blab
    # the chart grants what the controller's start-up checks read: none of them was refused as installed
    log = lab.kubectl("logs", "-n", NS, "deploy/gpualign-controller", timeout=60).stdout
    assert "could not be read" not in log and "could not be checked" not in log, log[-3000:]
    if not jobs(lab, TAG):  # this module's first test built it; alone, build it first the same way
        assert lab.cli("lab", "add-node", "deb-1", "--kernel", KERNEL, "--os", "debian12", "--branch", "535").code == 0
    first = attempt(lab, TAG, 1, timeout=900)
    wait_for(lambda: ready(driver_pod(lab, "deb-1")) or None, timeout=180, what="deb-1's driver pod Ready")
    # 1. pruned, then a node joins on the kernel: attempt 2, and the node's GPUs come up
    prune(lab, TAG)
    joined = time.monotonic()
    assert lab.cli("lab", "add-node", "deb-4", "--kernel", KERNEL, "--os", "debian12", "--branch", "535").code == 0
    second = attempt(lab, TAG, 2, timeout=600)
    wait_for(lambda: ready(driver_pod(lab, "deb-4")) or None, timeout=180, what="deb-4's driver pod Ready")
    print(f"pruned, a node joined: its image built again and its driver pod Ready in {time.monotonic() - joined:.1f}s")
    assert first["metadata"]["uid"] in {j["metadata"]["uid"] for j in jobs(lab, TAG)}  # attempt 1 kept, with its log
    assert wait_for(lambda: node_events(lab, "deb-4", "DriverImagePruned") or node_events(
        lab, "deb-1", "DriverImagePruned") or None, timeout=60, what="the prune told on a waiting node")
    # 2. no node runs the kernel any more; pruned again; a node on an older kernel announces it: attempt 3
    for name in ("deb-1", "deb-2", "deb-3", "deb-4"):
        lab.kubectl("delete", "node", name, "--wait=false")
    prune(lab, TAG)
    older = "6.1.0-47-amd64"
    assert lab.cli("lab", "push-image", f"535-{older}-debian12").code == 0  # its current image is there
    assert lab.cli("lab", "add-node", "next-1", "--kernel", older, "--os", "debian12", "--branch", "535").code == 0
    wait_for(lambda: ready(driver_pod(lab, "next-1")) or None, timeout=180, what="next-1's driver pod Ready")
    announced = time.monotonic()
    lab.kubectl("label", "node", "next-1", f"gpualign.io/kernel.next={KERNEL}", check=True)
    third = attempt(lab, TAG, 3, timeout=600)
    print(f"pruned, a node announced the kernel: built again in {time.monotonic() - announced:.1f}s")
    assert len({j["metadata"]["uid"] for j in (first, second, third)}) == 3
    reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
    try:
        assert reg.digest(TAG) is not None  # in the ledger before any node boots the kernel
    finally:
        reg.close()


BOOKWORM_NEXT = """Package: linux-image-amd64
Source: linux-signed-amd64 (6.1.170+1)
Version: 6.1.170-3
Architecture: amd64
Depends: linux-image-6.1.0-50-amd64 (= 6.1.170-3)
Description: Linux for 64-bit PCs (meta-package)
"""


@pytest.mark.timeout(1500)
def test_the_kernel_debians_archive_installs_next_is_built_before_any_node_boots_it(blab, controller, tmp_path,
                                                                                   serve):
    """Issue: the archive is the announcement. The chart's controller, with builds on and the archive read by
    default, reads an archive the lab serves as Debian's is served, signed by a key of its own that the chart is told
    to trust (apt's signed-by). The archive names 6.1.0-50 as bookworm's next kernel while no node runs or announces
    it: the image is built and in the ledger with nobody typing, the reboot gate's metric holds the pool's node until
    then, and a node that then boots the kernel has its driver pod Ready with no failed pull."""
    from tests.support.local_suite import LocalArchive, serve_directory

    lab = blab
    for name in ("deb-1", "deb-2", "deb-3", "deb-4", "next-1"):  # no node runs or announces the kernel
        lab.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
    reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
    try:
        if reg.digest(TAG) is not None:
            prune(lab, TAG)
    finally:
        reg.close()
    before = {j["metadata"]["uid"] for j in jobs(lab, TAG)}
    older = "6.1.0-47-amd64"
    assert lab.cli("lab", "push-image", f"535-{older}-debian12").code == 0
    assert lab.cli("lab", "add-node", "pool-1", "--kernel", older, "--os", "debian12", "--branch", "535").code == 0
    with LocalArchive(tmp_path / "archive") as archive:
        archive.publish("bookworm", {"amd64": ""})
        archive.publish("bookworm-updates", {"amd64": ""})
        archive.publish("bookworm-security", {"amd64": BOOKWORM_NEXT})
        server = serve_directory(serve, archive.root)
        lab.kubectl("create", "configmap", "archive-keyring", "-n", NS, f"--from-file=keyring.gpg={archive.keyring}",
                    check=True)
        installed, _ = chart_values(lab, tmp_path, port=controller)
        values = [*installed, "--set", "builds.archive.enabled=true",
                  "--set", f"builds.archive.mirror={server.url}/debian",
                  "--set", f"builds.archive.securityMirror={server.url}/debian-security",
                  "--set", "builds.archive.keyringConfigMap=archive-keyring", "--set", "builds.archive.pollSeconds=5"]
        announced = time.monotonic()
        helm(lab, "upgrade", "ga", str(CHART), "-n", NS, *values, "--wait", "--timeout", "180s")
        try:
            print(lab.kubectl("get", "pods", "-n", NS, "-o", "wide").stdout)
            metrics = f"http://127.0.0.1:{controller}/metrics"
            try:
                held = wait_for(lambda: [m for m in scrape(metrics) if m.startswith(
                    "gpualign_archive_kernel_driver_image_missing{") and 'node="pool-1"' in m and TAG in m] or None,
                    timeout=120, what="the reboot gate holding pool-1 for the archive's next kernel")
            except AssertionError as err:
                raise AssertionError(f"{err}\n{controller_log(lab)}") from None
            assert held[0].endswith(" 1.0"), held
            job = wait_for(lambda: next((j for j in jobs(lab, TAG) if j["metadata"]["uid"] not in before), None),
                           timeout=180, what="the archive's kernel's build Job")
            nodes = lab.kube().list_raw("/api/v1/nodes")
            assert not [n["metadata"]["name"] for n in nodes if KERNEL in (
                n["metadata"]["labels"].get("feature.node.kubernetes.io/kernel-version.full"),
                n["metadata"]["labels"].get("gpualign.io/kernel.next"))]  # no node runs or announces it
            attempt(lab, TAG, int(job["metadata"]["annotations"][J.ATTEMPT_ANNOTATION]), timeout=900)
            reg = RegistryClient(RegistryRef(host=lab.registry, repo="nvidia/driver", scheme="http"), timeout=30.0)
            try:
                assert reg.digest(TAG) is not None
            finally:
                reg.close()
            print(f"the archive named {KERNEL}: its image in the ledger {time.monotonic() - announced:.1f}s after the "
                  "controller was told where the archive is")
            wait_for(lambda: not [m for m in scrape(metrics)
                                  if m.startswith("gpualign_archive_kernel_driver_image_missing{")] or None,
                     timeout=60, what="the reboot gate opening once the image is in the ledger")
            landed = [m for m in scrape(metrics) if m.startswith("gpualign_archive_kernel_to_image_seconds_count")]
            assert landed and landed[0].endswith(" 1.0"), landed
            # the pool's node reboots into it: its driver pod pulls at once
            lab.kubectl("delete", "node", "pool-1", "--wait=false")
            assert lab.cli("lab", "add-node", "pool-1b", "--kernel", KERNEL, "--os", "debian12",
                           "--branch", "535").code == 0
            seen: list[str] = []

            def up() -> bool | None:
                pod = driver_pod(lab, "pool-1b")
                for status in (pod or {}).get("status", {}).get("containerStatuses") or []:
                    seen.append((status.get("state", {}).get("waiting") or {}).get("reason") or "")
                return ready(pod) or None

            wait_for(up, timeout=120, interval=0.2, what="pool-1b's driver pod Ready")
            assert "ImagePullBackOff" not in seen and "ErrImagePull" not in seen, seen
            assert "/debian-security/dists/bookworm-security/InRelease" in [p for p, _h, _q in server.seen]
        finally:
            helm(lab, "upgrade", "ga", str(CHART), "-n", NS, *installed, "--wait", "--timeout", "180s")
            lab.kubectl("delete", "configmap", "archive-keyring", "-n", NS, "--ignore-not-found")


def controller_log(lab: Lab) -> str:
    return lab.kubectl("logs", "-n", NS, "-l", "app.kubernetes.io/name=gpualign", "--tail", "60").stdout


def scrape(url: str) -> list[str]:
    """The metrics' samples, or none while the controller is not listening (a rollout's new pod)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return [line for line in answer.read().decode().splitlines() if not line.startswith("#")]
    except urllib.error.URLError:
        return []
