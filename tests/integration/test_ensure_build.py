"""`gpualign ensure` for real, as the seed's story goes: a Debian 12 node joins on 6.1.0-50-amd64 (Debian's security
update), its driver pod cannot pull, `check` flags the image with action build, `ensure --from` the check report
builds it from NVIDIA's module source against that kernel's headers, verifies and pushes it, and the driver pod
comes up. The image is then checked by this test with the kernel's own tools (modinfo and `modprobe
--dump-modversions` against that kernel's Module.symvers), independently of gpualign's verifier. That is the one
real build; its modules are cached (~/.cache/gpualign/ensure), so only a cold machine compiles (a few CPU-minutes).

Also: those modules offered for 6.1.0-47 are refused naming a symbol, with nothing pushed; a published image is
mirrored by digest from a second registry; a second run does nothing; two runs at once build once; bad input is one
line each."""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from gpualign.archive.apt import Archive
from gpualign.judging import kmod
from gpualign.judging import symvers as symvers_mod
from gpualign.judging.verify import verify
from gpualign.lab import docker_registry, kernel_load, processes
from tests.support.cli import run_cli
from tests.support.cosign_keys import key_pair
from tests.support.ensure_build import KERNEL, OTHER, TAG, client, gpu_workload_on, modversions, pulled_modules, symvers
from tests.support.lab import start_lab
from tests.support.waits import pod_events, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def modinfo(ko: Path, field: str) -> str:
    return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True, text=True,
                          check=True).stdout.strip()


def driver_ready(kube, node: str) -> bool:
    """The node's driver pod is Ready (the lab's kernel loaded its image's modules, or took the tag alone)."""
    pods = [p for p in kube.pods(label_selector="app.kubernetes.io/component=nvidia-driver")
            if p["spec"].get("nodeName") == node]
    return bool(pods) and any(c["type"] == "Ready" and c["status"] == "True"
                              for c in pods[0]["status"].get("conditions") or [])


@pytest.fixture
def story_lab(tmp_path):
    lab = start_lab(tmp_path / "state")
    yield lab
    run_cli("lab", "down", env=lab.env)


@pytest.mark.timeout(1800)  # cold: a bookworm build root and a real compile (a few CPU-minutes)
def test_a_debian_node_joins_check_flags_ensure_builds_verifies_pushes_and_its_driver_comes_up(story_lab, tmp_path):
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("lab", "add-node", "deb-1", "--kernel", KERNEL, "--os", "debian12", "--branch", "535").code == 0

    def driver_pod() -> dict | None:
        pods = [p for p in kube.pods(label_selector="app.kubernetes.io/component=nvidia-driver")
                if p["spec"].get("nodeName") == "deb-1"]
        return pods[0] if pods else None

    wait_for(lambda: (p := driver_pod()) and "ImagePullBackOff" in json.dumps(p.get("status")), timeout=60,
             what="deb-1's driver pod in ImagePullBackOff")
    # status and why do not look calm: the node has no driver, and they say what to mirror or build
    status = lab.cli("status", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1", "-o", "json")
    (row,) = json.loads(status.out)["nodes"]
    assert row["stuck"] and row["no_driver"].endswith(f"missing from the ledger: mirror or build it (gpualign "
                                                      f"ensure {TAG})"), row
    assert status.code == 0 and json.loads(status.out)["stuck"] == 1  # informative by default ...
    assert lab.cli("status", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1",
                   "--fail-on-stuck").code == 1  # ... and exit 1 on demand
    assert "no driver: driver pod gpu-operator/" in lab.cli("why", "deb-1", "--ledger", ledger).out
    check = lab.cli("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1", "-o", "json")
    assert check.code == 1, check.err
    (missing,) = json.loads(check.out)["missing"]
    assert (missing["tag"], missing["action"]) == (TAG, "build")
    (tmp_path / "check.json").write_text(check.out)

    res = lab.cli("ensure", "--from", str(tmp_path / "check.json"), "--ledger", ledger, "-o", "json", timeout=1700)
    assert res.code == 0, res.out + res.err
    report = json.loads(res.out)
    (image,) = report["images"]
    assert report["kind"] == "EnsureReport" and image["action"] == "build" and image["done"]
    assert image["verification"]["ok"] and image["verification"]["mismatches"] == 0
    assert image["digest"] == client(lab.registry).digest(TAG)

    wait_for(lambda: (p := driver_pod()) and any(c["type"] == "Ready" and c["status"] == "True"
                                                 for c in p["status"].get("conditions") or []),
             timeout=60, what="deb-1's driver pod Ready on the built image")
    clean = lab.cli("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1")
    assert clean.code == 0, clean.out + clean.err

    # the kernel decides: the image's modules loaded into Debian's own kernel of the tag, booted in a VM, get as far
    # as a machine without a GPU allows; another ABI's kernel refuses them in its own words; no modules, no pass
    image_ref = f"{lab.registry}/nvidia/driver:{TAG}"
    loaded = lab.cli("verify", image_ref, "-o", "json", timeout=600)
    assert loaded.code == 0, loaded.out + loaded.err
    verdict = json.loads(loaded.out)
    assert (verdict["kind"], verdict["verdict"], verdict["said"]) == ("KernelLoad", "accepted",
                                                                    ["NVRM: No NVIDIA GPU found."])
    assert [a["module"] for a in verdict["attempts"]] == ["drm", "nvidia"]
    other = lab.cli("verify", image_ref, "--kernel", OTHER, timeout=600)
    assert other.code == 1 and f"kernel {OTHER} refused the modules" in other.out, other.out + other.err
    assert "nvidia: disagrees about version of symbol module_layout" in other.out
    assert lab.cli("lab", "push-image", "535-6.1.0-50-amd64-debian12", "--repo", "empty/driver").code == 0
    empty = lab.cli("verify", f"{lab.registry}/empty/driver:{TAG}", timeout=120)
    assert empty.code == 1 and "holds no kernel modules" in empty.out, empty.out + empty.err
    gone = lab.cli("verify", f"{lab.registry}/nvidia/driver:535-6.1.0-99-amd64-debian12", timeout=120)
    assert gone.code == 2 and gone.err.strip().endswith("not in the registry"), gone.err
    assert lab.cli("status", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1", "--fail-on-stuck").code == 0

    rootfs = tmp_path / "image"
    config, files = pulled_modules(lab.registry, TAG, tmp_path, rootfs=rootfs)
    labels = config["config"]["Labels"]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert labels["version"] == f"535-{KERNEL}" and labels["io.gpualign.kernel"] == KERNEL
    # the booted kernel's verdict, recorded in the image's own labels before it was pushed
    loaded = json.loads(labels["io.gpualign.verified"])["kernel_load"]
    assert (loaded["kernel"], loaded["verdict"], loaded["said"]) == (KERNEL, "accepted", ["NVRM: No NVIDIA GPU found."])
    assert image["kernel_load"]["verdict"] == "accepted" and image["seconds"]["kernel_load"] > 0
    assert env["GPUALIGN_KERNEL"] == KERNEL and env["DRIVER_VERSION"].startswith("535.")
    assert config["config"]["Entrypoint"] == ["nvidia-driver", "init"] and not config["config"].get("Cmd")
    assert config["config"]["WorkingDir"] == "/drivers"
    assert env["DRIVER_BRANCH"] == "535" and labels["name"] == "NVIDIA Driver Container"

    # nvidia-driver, run in the image's own files (chroot; PATH as the image sets it), as the GPU Operator's
    # DaemonSet runs it: it refuses any kernel but its own in one line, before touching anything loaded; on its own
    # it goes on to load with the image's modprobe (here this machine's kernel is named as the image's own, and the
    # image has no modules for it: modprobe itself says so)
    host = os.uname().release
    init = ["chroot", str(rootfs), "nvidia-driver", "init"]
    refused = subprocess.run(init, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"gpualign: driver image 535-{KERNEL} holds NVIDIA {env['DRIVER_VERSION']} modules built and verified for "
        f"kernel {KERNEL}; this node runs {host}: refusing to load (the kernel would refuse them: version magic and "
        "symbol CRCs differ)"]
    assert "Starting installation of NVIDIA driver branch 535" in refused.stdout
    assert "Unloading" not in refused.stdout  # nothing loaded was touched
    own = subprocess.run(init, env={**env, "GPUALIGN_KERNEL": host}, capture_output=True, text=True, timeout=60)
    assert own.returncode != 0 and "refusing" not in own.stderr, own.stderr
    assert f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{host}" in own.stderr
    usage = subprocess.run(["chroot", str(rootfs), "nvidia-driver", "update"], env=env, capture_output=True,
                           text=True)
    assert usage.returncode == 1 and usage.stderr.startswith("Usage: ")
    nobranch = subprocess.run(init, env={k: v for k, v in env.items() if k != "DRIVER_BRANCH"},
                              capture_output=True, text=True)
    assert nobranch.returncode == 1 and "Missing driver version" in nobranch.stderr
    probe = subprocess.run(["chroot", str(rootfs), "nvidia-driver", "probe_nvidia_peermem"], env=env,
                           capture_output=True, text=True)
    assert probe.returncode == 0 and "MOFED drivers are not ready" in probe.stdout
    # the user space at the modules' version, as the container toolkit and the operator's probes find it
    version = env["DRIVER_VERSION"]
    smi = subprocess.run(["chroot", str(rootfs), "nvidia-smi", "-h"], env=env, capture_output=True, text=True)
    assert smi.stdout.splitlines()[0].endswith(f"v{version}")
    cache = subprocess.run(["ldconfig", "-r", str(rootfs), "-p"], capture_output=True, text=True).stdout
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-cfg.so.1"):
        assert soname in cache, soname
        assert (rootfs / "usr/lib/x86_64-linux-gnu" / soname).resolve().name.endswith(f".so.{version}")
    no_driver = subprocess.run(["chroot", str(rootfs), "nvidia-smi"], env=env, capture_output=True, text=True)
    assert no_driver.returncode == 9 and "couldn't communicate with the NVIDIA driver" in no_driver.stdout
    assert json.loads(labels["io.gpualign.verified"])["userspace"]["nvidia_smi"] == version
    # image scanners read the base's packages from dpkg's status.d, as in distroless images
    assert (rootfs / "var/lib/dpkg/status.d/kmod").read_text().startswith("Package: kmod\n")
    assert f"lib/modules/{KERNEL}/modules.dep" in {n.lstrip("./") for n in files}
    modules = sorted(tmp_path.glob("*.ko"))
    assert {m.name for m in modules} >= {"nvidia.ko", "nvidia-uvm.ko", "nvidia-modeset.ko", "nvidia-drm.ko"}

    # The oracle: the kernel's own tools, not gpualign's reader
    table = symvers(KERNEL)
    exported_by_the_set = set()
    for ko in modules:
        exported_by_the_set |= set(subprocess.run(["sh", "-c", f"nm {ko} 2>/dev/null | sed -n 's/.* __ksymtab_//p'"],
                                                  capture_output=True, text=True).stdout.split())
    checked = 0
    for ko in modules:
        assert modinfo(ko, "vermagic").split()[0] == KERNEL, ko
        assert modinfo(ko, "version") == env["DRIVER_VERSION"], ko
        for sym, crc in modversions(ko).items():
            if sym in table:
                checked += 1
                assert table[sym] == crc, f"{ko.name}: {sym}"
            else:
                assert sym in exported_by_the_set, f"{ko.name}: {sym} exported by nobody"
    assert checked == image["verification"]["symbols_checked"] > 700

    again = lab.cli("ensure", TAG, "--ledger", ledger, timeout=60)  # idempotent: nothing built, nothing pushed
    assert again.code == 0 and f"{TAG}: present (" in again.out and "push" not in again.err, again.err


@pytest.mark.timeout(1800)  # cold: a compile against the 6.12 headers (a few CPU-minutes), then cached
def test_a_node_on_debians_6_12_kernel_is_built_for_its_release_and_its_driver_comes_up(story_lab, tmp_path):
    """Debian 12's current kernels (bookworm-security): NFD labels 6.12.N+deb12-amd64 as 6.12.N_deb12-amd64, the
    tag holds the label, and everything the kernel reads holds the release: headers, version magic, /lib/modules,
    the image's own kernel check. The newest such kernel the archive carries (it moves on)."""
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    release = [r for r in Archive().headers_releases("6.12.") if r.endswith("+deb12-amd64")][-1]
    label = release.replace("+", "_")
    tag = f"535-{label}-debian12"
    added = lab.cli("lab", "add-node", "deb-612", "--kernel", release, "--os", "debian12", "--branch", "535")
    assert added.code == 0, added.err
    check = lab.cli("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-612", "-o", "json")
    (missing,) = json.loads(check.out)["missing"]
    assert (missing["tag"], missing["action"]) == (tag, "build"), check.out
    (tmp_path / "check.json").write_text(check.out)

    # with a signing key, what the build pushes is signed, and its SBOM and provenance attested (cosign's formats)
    from gpualign.judging import signature_check
    from tests.support.cosign_keys import key_pair

    key_pair(tmp_path, "cosign")
    res = run_cli("ensure", "--from", str(tmp_path / "check.json"), "--ledger", ledger, "-o", "json", timeout=1700,
                  env={**lab.env, "GPUALIGN_COSIGN_KEY": str(tmp_path / "cosign.key")})
    assert res.code == 0, res.out + res.err
    (image,) = json.loads(res.out)["images"]
    assert image["action"] == "build" and image["verification"]["ok"] and image["verification"]["kernel"] == release
    assert image["verification"]["symbols_checked"] > 500
    reg = client(lab.registry)
    try:
        digest = reg.digest(tag)
        assert digest == image["digest"] and image["signature"] == f"sha256-{digest.removeprefix('sha256:')}.sig"
        assert signature_check.verify(reg, digest, signature_check.load_trusted([str(tmp_path / "cosign.pub")])).ok
        sbom_manifest = reg.manifest(image["attestations"][1])
        assert sbom_manifest is not None
        sbom = json.loads(reg.blob(sbom_manifest["layers"][0]["digest"]))
    finally:
        reg.close()
    assert {p["name"] for p in sbom["packages"]} >= {f"linux-headers-{release}", "nvidia-kernel-source", "libcuda1"}
    assert len(sbom["files"]) >= 4 and all(len(f["checksums"][0]["checksumValue"]) == 64 for f in sbom["files"])

    # the lab loads its modules as the node's kernel would: against the release's Module.symvers
    wait_for(lambda: driver_ready(kube, "deb-612"), timeout=90, what="deb-612's driver pod Ready on the built image")
    config, files = pulled_modules(lab.registry, tag, tmp_path)
    labels = config["config"]["Labels"]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert labels["io.gpualign.kernel"] == release and env["GPUALIGN_KERNEL"] == env["KERNEL_VERSION"] == release
    assert f"lib/modules/{release}/modules.dep" in {n.lstrip("./") for n in files}


def cached_modules() -> Path:
    found = sorted(Path.home().glob(f".cache/gpualign/ensure/modules/*/{KERNEL}/proprietary/unsigned"))
    assert found, "the build test above leaves its modules in the cache"
    return found[-1]


@pytest.mark.timeout(600)
def test_modules_built_for_one_security_update_are_refused_for_another_naming_a_symbol(lab):
    ledger = f"registry://{lab.registry}/nvidia/driver"
    tag = f"535-{OTHER}-debian12"
    modules = cached_modules()
    res = lab.cli("ensure", tag, "--ledger", ledger, "--modules-from", str(modules), timeout=300)
    assert res.code == 1, res.out + res.err
    line = res.err.strip().splitlines()[-1]
    assert line.startswith(f"gpualign: refused: {tag}: would not load on {OTHER}: ") and "nothing pushed" in line
    assert "disagrees about version of symbol" in line
    symbol = line.split("disagrees about version of symbol ")[1].split()[0]
    module = line.split("first refused symbol: ")[1].split(":")[0]
    # the oracle agrees: that module's CRC for that symbol differs from 6.1.0-47's
    assert modversions(modules / f"{module}.ko")[symbol] != symvers(OTHER)[symbol]
    assert client(lab.registry).digest(tag) is None  # nothing pushed


NVIDIA_LABELS = {"version": "580-5.15.0-124-generic"}  # as NVIDIA's precompiled pipeline labels its images


@pytest.fixture
def upstream(tmp_path):
    """A second registry standing in for NVIDIA's, holding a 'published' Ubuntu image."""
    proc = docker_registry.start(tmp_path / "upstream")
    yield proc.address
    processes.stop(proc)


def test_a_published_image_is_mirrored_by_digest_and_a_dry_run_changes_nothing(lab, upstream):
    tag = "580-5.15.0-124-generic-ubuntu22.04"
    up = client(upstream)
    up.push_image(tag, {"DRIVER_VERSION": "580.95.05"}, labels=NVIDIA_LABELS)
    source = up.digest(tag)
    ledger = f"registry://{lab.registry}/mirror/driver"
    dry = lab.cli("ensure", tag, "--ledger", ledger, "--upstream", f"registry://{upstream}/nvidia/driver",
                  "--dry-run")
    assert dry.code == 0 and f"{tag}: would mirror" in dry.out
    assert client(lab.registry, "mirror/driver").digest(tag) is None
    res = lab.cli("ensure", tag, "--ledger", ledger, "--upstream", f"registry://{upstream}/nvidia/driver",
                  "-o", "json")
    assert res.code == 0, res.err
    (image,) = json.loads(res.out)["images"]
    assert image["action"] == "mirror" and image["digest"] == source
    assert client(lab.registry, "mirror/driver").digest(tag) == source  # byte for byte, by digest


def test_an_upstream_image_nothing_vouches_for_is_neither_mirrored_nor_signed(lab, upstream, tmp_path):
    """Review 6's H3: an image with no labels and no modules (or one whose labels name another build, or one not
    signed by the upstream's key) under a tag no node uses yet is refused before the copy: nothing lands, nothing
    is signed with the team's key, exit 1 naming why."""
    from gpualign.ensure import signatures

    tag = "580-5.15.0-124-generic-ubuntu22.04"
    up = client(upstream)
    ledger = f"registry://{lab.registry}/vouch/driver"
    key, _ = key_pair(tmp_path, "team")
    env = {**lab.env, "GPUALIGN_COSIGN_KEY": str(key)}
    for labels, said in ((None, "unverified: its config carries no labels"),
                         ({"version": "580-5.15.0-125-generic"}, "wrong: its label version=580-5.15.0-125-generic")):
        up.push_image(tag, {"DRIVER_VERSION": "580.95.05"}, labels=labels)
        res = run_cli("ensure", tag, "--ledger", ledger, "--upstream", f"registry://{upstream}/nvidia/driver",
                      env=env, timeout=300)
        assert res.code == 1, res.out + res.err
        assert said in res.err and "not mirrored, not signed" in res.err, res.err
        assert client(lab.registry, "vouch/driver").digest(tag) is None  # nothing landed
    # labelled as NVIDIA labels it, but the upstream's key is given and it never signed this digest
    up.push_image(tag, {"DRIVER_VERSION": "580.95.05"}, labels=NVIDIA_LABELS)
    theirs, theirs_pub = key_pair(tmp_path, "theirs")
    res = run_cli("ensure", tag, "--ledger", ledger, "--upstream", f"registry://{upstream}/nvidia/driver",
                  "--upstream-key", str(theirs_pub), env=env, timeout=300)
    assert res.code == 1 and "is not signed by its key" in res.err, res.err
    assert client(lab.registry, "vouch/driver").digest(tag) is None
    # signed by the upstream's key: verified, judged, mirrored, then signed with the team's
    signatures.sign(up, tag, signatures.load_private_key(theirs))
    res = run_cli("ensure", tag, "--ledger", ledger, "--upstream", f"registry://{upstream}/nvidia/driver",
                  "--upstream-key", str(theirs_pub), env=env, timeout=300)
    assert res.code == 0, res.err
    assert "upstream signature verified" in res.err and "upstream image judged" in res.err
    assert client(lab.registry, "vouch/driver").digest(tag) == up.digest(tag)


def test_a_build_in_another_cluster_holds_the_registry_lock_and_this_run_waits_then_finds_it_made(lab, upstream):
    """Two clusters filling one registry: a Kubernetes Lease is per cluster, so only the registry can say that
    another cluster is making the tag. This run waits on the registry's lock, names its holder, and once the holder
    has pushed and released, finds the image made and makes nothing."""
    from gpualign.ensure import registry_lock

    tag = "580-5.15.0-124-generic-ubuntu22.04"
    client(upstream).push_image(tag, {"DRIVER_VERSION": "580.95.05"}, labels=NVIDIA_LABELS)
    ledger_repo = "shared/driver"
    other = client(lab.registry, ledger_repo)  # "the other cluster": its build holds the lock
    held, release = threading.Event(), threading.Event()

    def other_cluster() -> None:
        with registry_lock.hold(other, tag, lambda _m: None):
            held.set()
            release.wait(120)
            other.push_image(tag, {"DRIVER_VERSION": "580.95.05", "MADE_BY": "the other cluster"})

    worker = threading.Thread(target=other_cluster)
    worker.start()
    assert held.wait(30)
    proc = subprocess.Popen([sys.executable, "-m", "gpualign", "ensure", tag, "--ledger",
                             f"registry://{lab.registry}/{ledger_repo}", "--upstream",
                             f"registry://{upstream}/nvidia/driver"], env={**os.environ, **lab.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)  # it reads the hold and waits
        assert proc.poll() is None
        release.set()
        out, err = proc.communicate(timeout=120)
    finally:
        release.set()
        worker.join(60)
        other.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "waiting: " in err and f"builds it (registry lock {lab.registry}/{ledger_repo}-locks:{tag}" in err, err
    assert "made by another run meanwhile" in err or "made by another run meanwhile" in out, (out, err)
    made = registry_lock.read(client(lab.registry, ledger_repo), tag)
    assert made is None  # released: the next build of it takes it at once


def test_two_runs_at_once_build_once(lab):
    ledger = f"registry://{lab.registry}/concurrent/driver"
    modules = cached_modules()
    cmd = ["ensure", TAG, "--ledger", ledger, "--modules-from", str(modules)]
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(lab.cli(*cmd, timeout=300))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.code for r in results] == [0, 0], [r.err for r in results]
    outs = sorted(r.out for r in results)
    assert sum("built →" in o for o in outs) == 1 and sum("present (" in o for o in outs) == 1, outs


class Refusing(http.server.BaseHTTPRequestHandler):
    """A registry that has nothing and refuses every write: 401 with a Basic challenge."""

    def log_message(self, *_args: object) -> None:
        return

    def _refuse(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="refusing"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:  # noqa: N802
        if self.path.startswith("/v2/") and "/manifests/" in self.path:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._refuse()

    do_GET = do_HEAD  # noqa: N815
    do_POST = do_PUT = do_PATCH = _refuse  # noqa: N815


def test_bad_input_is_one_line_each_and_nothing_is_pushed(lab, tmp_path):
    ledger = f"registry://{lab.registry}/bad/driver"
    cases = {
        "580-6.1.0-50-amd64-debian12": "Debian bookworm carries NVIDIA 470, 525, 535, not 580",
        "535-6.1.0-99-amd64-debian12": "kernel 6.1.0-99-amd64: no headers package linux-headers-6.1.0-99-amd64 "
                                       "in Debian's archive (looked in bookworm, bookworm-updates, bookworm-security",
        "535-5.15.0-124-generic-ubuntu22.04": "ubuntu22.04 images are not built by gpualign: render the recipe",
        "535-6.1.0-47-amd64-plan9": "not a precompiled driver tag",
        "535-6.1.0-50-powerpc64le-debian12": "gpualign builds debian12 images for amd64, arm64, not ppc64le",
    }
    for tag, message in cases.items():
        res = lab.cli("ensure", tag, "--ledger", ledger, "--upstream", "none", timeout=120)
        assert res.code == 2 and message in res.err, (tag, res.err)
        assert len(res.err.strip().splitlines()[-1:]) == 1 and "Traceback" not in res.err
        # a dry run makes the same checks, and refuses the same way
        dry = lab.cli("ensure", tag, "--ledger", ledger, "--upstream", "none", "--dry-run", timeout=120)
        assert dry.code == 2 and message in dry.err, (tag, dry.out, dry.err)
    # air-gapped: NVIDIA's registry is not asked for a tag the rules say it never published (the review's #20: the
    # dry run failed on nvcr.io being unreachable instead of saying what check says)
    unpublished = lab.cli("ensure", "580-6.5.0-45-generic-ubuntu22.04", "--ledger", ledger, "--dry-run", timeout=120)
    assert unpublished.code == 2 and "render the recipe" in unpublished.err, unpublished.err
    assert "nvcr.io" not in unpublished.err
    # review 6's Low: a dry run plans with the ledger out of reach, and says it did not ask it
    offline = lab.cli("ensure", TAG, "--ledger", "registry://127.0.0.1:1/nvidia/driver", "--upstream", "none",
                      "--dry-run", timeout=120)
    assert offline.code == 0, offline.err
    assert f"{TAG}: would build if the ledger lacks it (not asked: registry 127.0.0.1:1 unreachable" in offline.out
    assert lab.cli("ensure", TAG, "--ledger", "registry://127.0.0.1:1/nvidia/driver", "--upstream", "none",
                   timeout=120).code != 0  # a real run never guesses
    # from a report (the runbook's `check -o json | ensure --from -`), one tag gpualign cannot make does not stop the
    # others: it is listed under failed, and the run exits 1 (the review's #14: it exited 2 and made nothing)
    (tmp_path / "mixed.json").write_text(json.dumps({"kind": "CheckReport", "missing": [
        {"tag": "535-6.1.0-50-powerpc64le-debian12"}, {"tag": "535-6.1.0-47-amd64-plan9"}, {"tag": TAG}]}))
    mixed = lab.cli("ensure", "--from", str(tmp_path / "mixed.json"), "--ledger", ledger, "--upstream", "none",
                    "--dry-run", "-o", "json", timeout=120)
    assert mixed.code == 1, mixed.err
    made = json.loads(mixed.out)
    assert [i["tag"] for i in made["images"]] == [TAG] and made["images"][0]["action"] == "build"
    assert sorted(f["tag"] for f in made["failed"]) == ["535-6.1.0-47-amd64-plan9", "535-6.1.0-50-powerpc64le-debian12"]
    assert "gpualign builds debian12 images for amd64, arm64, not ppc64le" in mixed.err and "Traceback" not in mixed.err
    conflicting = lab.cli("ensure", TAG, "--ledger", ledger, "--ledger", f"registry://{lab.registry}/other/driver")
    assert conflicting.code == 2 and "--ledger given twice" in conflicting.err, conflicting.err
    banana = lab.cli("ensure", TAG, "--ledger", ledger, "--upstream", "banana")
    assert banana.code == 2 and banana.err.startswith("gpualign: error: --upstream 'banana': expected"), banana.err
    rendered = lab.cli("ensure", TAG, "--render", str(tmp_path / "r"), "--dry-run")
    assert rendered.code == 2 and not (tmp_path / "r").exists(), rendered.err
    assert client(lab.registry, "bad/driver").tags() == []

    no_buildah = run_cli("ensure", f"535-{OTHER}-debian12", "--ledger", ledger,
                         env={**lab.env, "PATH": str(tmp_path)}, timeout=60)
    assert no_buildah.code == 2 and "buildah is not installed" in no_buildah.err, no_buildah.err
    # every build tool there but qemu: one line naming the package, and the switch that builds without it
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("buildah", "mmdebstrap", "chroot", "depmod", "skopeo", "apt-get", "dpkg-deb", "gpgv"):
        found = shutil.which(tool) or f"/usr/sbin/{tool}"
        (tools / tool).symlink_to(found)
    no_qemu = run_cli("ensure", f"535-{OTHER}-debian12", "--ledger", ledger,
                      env={**lab.env, "PATH": str(tools)}, timeout=60)
    assert no_qemu.code == 2 and no_qemu.err.count("\n") == 1, no_qemu.err
    assert "qemu-system-x86_64 is not installed" in no_qemu.err and "--no-kernel-load" in no_qemu.err, no_qemu.err

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        refusing = f"registry://127.0.0.1:{server.server_address[1]}/nvidia/driver"
        t0 = time.monotonic()
        res = lab.cli("ensure", TAG, "--ledger", refusing, "--modules-from", str(cached_modules()), timeout=300)
        assert res.code == 1 and "the registry refused the push (401 unauthorized)" in res.err, res.err
        assert time.monotonic() - t0 < 240
    finally:
        server.shutdown()


@pytest.mark.timeout(900)
def test_upgrade_ensure_builds_the_missing_target_before_anything_is_cordoned(story_lab):
    """A Debian node on branch 580 (a tag-only lab image) moves to 535, whose image nobody built: `upgrade --ensure`
    builds and verifies it first, and only then does the walk cordon the node; the driver pod comes up on it."""
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("lab", "push-image", f"580-{KERNEL}-debian12").code == 0
    assert lab.cli("lab", "add-node", "deb-2", "--kernel", KERNEL, "--os", "debian12", "--branch", "580",
                   "--driver", "580.95.05").code == 0
    selector = ("-l", "kubernetes.io/hostname=deb-2")
    dry = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--ensure", "--dry-run")
    assert dry.code == 1 and f"ensure: would build {TAG}" in dry.out, dry.out + dry.err  # image still missing
    assert client(lab.registry).digest(TAG) is None
    res = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--ensure", "--yes",
                  timeout=800)
    assert res.code == 0, res.out + res.err
    pushed = res.err.index(f"ensure {TAG}: pushed: sha256:")
    assert pushed < res.err.index("deb-2: upgrade-required → cordon-required")  # image ensured, then cordon
    node = kube.get("/api/v1/nodes/deb-2")
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"].startswith("535.")


@pytest.mark.timeout(900)
def test_a_mistagged_image_is_seen_by_check_never_cordoned_for_and_crash_loops_with_the_kernels_message(story_lab):
    """6.1.0-50's image pushed under 6.1.0-47's tag (a mis-tagged push): check calls it wrong-image before any node
    is touched (its labels; with --verify-modules, the module and symbol the kernel would refuse); an upgrade to it
    never cordons the node; and a driver pod that pulls it crash-loops with the kernel's own message."""
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("ensure", TAG, "--ledger", ledger, timeout=1200).code == 0
    cloud = f"{OTHER.removesuffix('-amd64')}-cloud-amd64"  # 6.1.0-47-cloud-amd64: its own DaemonSet pool
    wrong, wrong_cloud = f"535-{OTHER}-debian12", f"535-{cloud}-debian12"
    for tag in (wrong, wrong_cloud):  # 6.1.0-50's image pushed under two 6.1.0-47 tags
        copied = subprocess.run(["skopeo", "copy", "--all", "--src-tls-verify=false", "--dest-tls-verify=false",
                                 f"docker://{lab.registry}/nvidia/driver:{TAG}",
                                 f"docker://{lab.registry}/nvidia/driver:{tag}"], capture_output=True, text=True)
        assert copied.returncode == 0, copied.stderr
    assert lab.cli("lab", "push-image", f"580-{cloud}-debian12").code == 0
    assert lab.cli("lab", "add-node", "deb-u", "--kernel", cloud, "--os", "debian12", "--branch", "580",
                   "--driver", "580.95.05").code == 0
    selector = ("-l", "kubernetes.io/hostname=deb-u")

    seen = lab.cli("check", "--ledger", ledger, *selector, "--driver-branch", "535", "-o", "json")
    assert seen.code == 1, seen.err
    (node,) = json.loads(seen.out)["nodes"]
    assert node["status"] == "wrong-image" and json.loads(seen.out)["summary"]["wrong_image"] == 1
    assert node["reason"] == (f"present but wrong: its label io.gpualign.kernel says it was built for kernel {KERNEL},"
                              f" not {cloud}")
    # plan counts it as work to do, as a missing image
    planned = lab.cli("plan", "--ledger", ledger, *selector, "--driver-branch", "535", "-o", "json")
    assert planned.code == 1 and json.loads(planned.out)["to_build"] == [wrong_cloud], planned.out + planned.err
    (needed,) = json.loads(planned.out)["needed"]
    assert needed["wrong"].startswith("its label io.gpualign.kernel says") and not needed["in_ledger"]
    deep = lab.cli("check", "--ledger", ledger, *selector, "--driver-branch", "535", "--verify-modules", "-o", "json")
    (node,) = json.loads(deep.out)["nodes"]
    assert deep.code == 1 and node["status"] == "wrong-image", deep.err
    assert f"its modules would not load on {cloud}: " in node["reason"]
    # names the module and the symbol (the cloud kernel has no DRM at all: "Unknown symbol")
    assert re.search(r"nvidia[-a-z]*: (disagrees about version of symbol|Unknown symbol) \w+", node["reason"])

    walk = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--yes", timeout=300)
    assert walk.code == 1, walk.out + walk.err
    after = kube.get("/api/v1/nodes/deb-u")
    assert after["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required"
    assert not after["spec"].get("unschedulable")  # never cordoned
    # the walk checks the modules by default: the kernel's own refusal, nvidia.ko first, as modprobe loads it
    assert after["metadata"]["annotations"]["gpualign.io/upgrade-blocker"].startswith(
        f"image present but wrong: {wrong_cloud}: its modules would not load on {cloud}: nvidia: ")

    assert lab.cli("lab", "add-node", "deb-c", "--kernel", OTHER, "--os", "debian12", "--branch", "535").code == 0

    def crashing() -> dict | None:
        pods = [p for p in kube.pods(label_selector="app.kubernetes.io/component=nvidia-driver")
                if p["spec"].get("nodeName") == "deb-c"]
        statuses = (pods[0].get("status") or {}).get("containerStatuses") or [] if pods else []
        waiting = (statuses[0].get("state") or {}).get("waiting") or {} if statuses else {}
        return pods[0] if waiting.get("reason") == "CrashLoopBackOff" else None

    pod = wait_for(crashing, timeout=120, what="deb-c's driver pod crash-looping")
    message = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"]
    # a kernel with CONFIG_MODVERSIONS compares vermagic without its release and refuses on the first CRC: EINVAL,
    # which insmod prints as "Invalid parameters"
    assert message.startswith("insmod: ERROR: could not insert module ") and ": Invalid parameters; " in message
    assert "disagrees about version of symbol" in message
    events = pod_events(kube, pod, "BackOff")
    assert "driver modules refused by the node's kernel" in events[0]["message"]


@pytest.mark.timeout(600)
def test_jobs_work_on_images_at_once_and_a_failure_does_not_undo_the_others(lab):
    """--jobs 2 with two tags: both in the works at once; the one whose modules fit is pushed, the other refused
    naming its symbol, and the run exits 1 naming the image that was made."""
    ledger = f"registry://{lab.registry}/jobs/driver"
    wrong = f"535-{OTHER}-debian12"
    res = lab.cli("ensure", TAG, wrong, "--ledger", ledger, "--modules-from", str(cached_modules()), "--jobs", "2",
                  timeout=500)
    assert res.code == 1, res.out + res.err
    assert f"{TAG}: build done (sha256:" in res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith(f"gpualign: refused: {wrong}: would not load on {OTHER}: ") and "nothing pushed" in last
    assert client(lab.registry, "jobs/driver").digest(TAG) is not None
    assert client(lab.registry, "jobs/driver").digest(wrong) is None
    # both were in the works at once: one after another, the second (wrong) would start only after the first's push
    lines = res.err.splitlines()
    first_push = next(i for i, line in enumerate(lines) if f"{TAG}: pushed:" in line)
    assert any(f"{wrong}: headers:" in line for line in lines[:first_push]), res.err
    # -o json: the report of what was made is written even though the run fails, naming what failed
    again = lab.cli("ensure", TAG, wrong, "--ledger", ledger, "--modules-from", str(cached_modules()), "-o", "json",
                    timeout=500)
    assert again.code == 1, again.err
    report = json.loads(again.out)
    assert [(i["tag"], i["action"]) for i in report["images"]] == [(TAG, "present")]
    (failed,) = report["failed"]
    assert failed["tag"] == wrong and failed["error"].startswith(f"{wrong}: would not load on {OTHER}: ")


@pytest.mark.timeout(900)
def test_runs_on_two_machines_build_once_through_a_lease(lab, tmp_path):
    """Two ensure runs that share no file lock (each its own cache, as two machines) and hold a Lease per image on
    the lab's cluster (--lease): one builds, the other waits for the Lease and then finds the image present."""
    ledger = f"registry://{lab.registry}/leased/driver"
    modules = cached_modules()
    assert lab.kubectl("create", "namespace", "gpualign-builds").returncode == 0
    missing = run_cli("ensure", TAG, "--ledger", ledger, "--lease", "no-such-namespace", env=lab.env)
    assert missing.code == 2 and "namespace no-such-namespace does not exist" in missing.err, missing.err
    assert "--lease NAMESPACE" in missing.err and len(missing.err.strip().splitlines()) == 1
    results: list = []

    def machine(i: int) -> None:
        env = {**lab.env, "GPUALIGN_CACHE": str(tmp_path / f"machine-{i}")}
        results.append(run_cli("ensure", TAG, "--ledger", ledger, "--modules-from", str(modules), "--lease",
                               "gpualign-builds", env=env, timeout=800))

    threads = [threading.Thread(target=machine, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.code for r in results] == [0, 0], [r.err for r in results]
    outs = sorted(r.out for r in results)
    assert sum("built →" in o for o in outs) == 1 and sum("present (" in o for o in outs) == 1, outs
    assert sum("waiting: another ensure holds Lease gpualign-builds/gpualign-ensure-" in r.err
               for r in results) == 1, [r.err for r in results]
    import hashlib

    name = f"gpualign-ensure-{hashlib.sha256(TAG.encode()).hexdigest()[:16]}"  # the documented name
    lease = json.loads(lab.kubectl("get", "lease", "-n", "gpualign-builds", name, "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"] == ""  # given up when the build ended


def push_without_labels(registry: str, source: str, tag: str) -> None:
    """`source`'s image pushed again under `tag` with every label removed from its config: what a CI job that
    copies layers into a fresh image produces. The layers (the modules) are the same blobs."""
    import hashlib

    reg = client(registry)
    try:
        manifest = reg.manifest(source)
        assert manifest is not None and "config" in manifest, "a single-platform image"
        config = json.loads(reg.blob(manifest["config"]["digest"]))
        config["config"].pop("Labels", None)
        data = json.dumps(config).encode()
        digest = reg.push_blob(data)
        assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
        manifest["config"] = {**manifest["config"], "digest": digest, "size": len(data)}
        manifest.pop("annotations", None)
        reg.push_manifest(tag, manifest)
        assert not (reg.image_config(tag) or {}).get("config", {}).get("Labels")
    finally:
        reg.close()


@pytest.mark.timeout(900)
def test_an_unlabelled_mistag_is_refused_by_the_walks_module_check_and_the_node_keeps_its_pods(story_lab):
    """6.1.0-50's image, its labels stripped, pushed under 6.1.0-47's tag: the labels cannot tell, so check (without
    --verify-modules) calls it present; the walk checks the modules by default, holds the node before cordon naming
    the module and symbol the kernel would refuse first, and leaves the node uncordoned with its GPU pod untouched.
    --no-verify-modules is the explicit opt-out, and its dry run shows it would walk."""
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("ensure", TAG, "--ledger", ledger, "--modules-from", str(cached_modules()), timeout=600).code == 0
    wrong = f"535-{OTHER}-debian12"
    push_without_labels(lab.registry, TAG, wrong)
    assert lab.cli("lab", "push-image", f"580-{OTHER}-debian12").code == 0
    assert lab.cli("lab", "add-node", "deb-m", "--kernel", OTHER, "--os", "debian12", "--branch", "580",
                   "--driver", "580.95.05").code == 0
    selector = ("-l", "kubernetes.io/hostname=deb-m")
    workload = gpu_workload_on(kube, "deb-m", "trainer-m")

    labels_only = lab.cli("check", "--ledger", ledger, *selector, "--driver-branch", "535", "-o", "json")
    (node,) = json.loads(labels_only.out)["nodes"]
    # the case the walk must catch: labels cannot tell, so check does not vouch for it (the review's P0 #9: it said
    # "present" plainly, while the walk held the node)
    assert node["status"] == "present" and node["verified"] is False, labels_only.out
    assert "its config carries no labels" in node["reason"], node["reason"]

    opt_out = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--no-verify-modules",
                      "--dry-run")
    assert "image present" in opt_out.out and "never cordoned" not in opt_out.out, opt_out.out

    t0 = time.monotonic()
    walk = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--yes", timeout=300)
    took = time.monotonic() - t0
    assert walk.code == 1, walk.out + walk.err
    after = kube.get("/api/v1/nodes/deb-m")
    assert after["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required"
    assert not after["spec"].get("unschedulable")  # never cordoned
    blocker = after["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
    # the kernel loads nvidia.ko first, and names the first symbol it refuses there
    assert re.fullmatch(rf"image present but wrong: {wrong}: its modules would not load on {OTHER}: "
                        r"nvidia: disagrees about version of symbol \w+ .*", blocker), blocker
    still = kube.get(f"/api/v1/namespaces/default/pods/{workload['metadata']['name']}")
    assert still is not None and still["metadata"]["uid"] == workload["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")
    assert took < 120, f"the walk took {took:.0f}s"
    # check --verify-modules and the walk give the same first refusal
    deep = lab.cli("check", "--ledger", ledger, *selector, "--driver-branch", "535", "--verify-modules", "-o", "json")
    (node,) = json.loads(deep.out)["nodes"]
    assert node["status"] == "wrong-image" and node["reason"] == "present but wrong: " + blocker.split(": ", 2)[2]
    assert json.loads(deep.out)["wrong"][0]["tag"] == wrong

    # ensure repairs what check reports: refused as wrong (exit 1) until --replace-wrong
    (tmp := story_lab.state_dir.parent / "deep.json").write_text(deep.out)
    refused = lab.cli("ensure", "--from", str(tmp), "--ledger", ledger, "--verify-modules", timeout=300)
    assert refused.code == 1 and f"{wrong}: present but wrong" in refused.out + refused.err, refused.out + refused.err


@pytest.mark.timeout(600)
def test_ensure_replaces_a_present_but_wrong_image_only_when_told(lab):
    """A tag-only image (no modules) sits under a Debian tag whose real modules are cached: `ensure --verify-modules`
    reports it (exit 1) and changes nothing; with --replace-wrong it is made again, verified and pushed over the
    tag; then it is present, and verifies."""
    ledger = f"registry://{lab.registry}/repair/driver"
    reg = client(lab.registry, "repair/driver")
    reg.push_image(TAG, {"DRIVER_VERSION": "535.309.01"})
    before = reg.digest(TAG)
    reported = lab.cli("ensure", TAG, "--ledger", ledger, "--verify-modules", timeout=300)
    assert reported.code == 1, reported.out + reported.err
    assert (f"{TAG}: present but unverified: its modules could not be verified: it holds no kernel modules under "
            f"/lib/modules or /opt/lib/modules to check against {KERNEL}") in reported.err
    assert "--replace-wrong" in reported.err and reg.digest(TAG) == before
    # without --verify-modules: nothing in its config says what it is (no labels), so it is never "nothing to do"
    # (the review's finding: ensure said "present in the ledger: nothing to do" where the walk held the node)
    labels_only = lab.cli("ensure", TAG, "--ledger", ledger)
    assert labels_only.code == 1, labels_only.out + labels_only.err
    assert f"{TAG}: present but unverified: its config carries no labels" in labels_only.err, labels_only.err
    replaced = lab.cli("ensure", TAG, "--ledger", ledger, "--verify-modules", "--replace-wrong", "-o", "json",
                       timeout=500)
    assert replaced.code == 0, replaced.out + replaced.err
    (image,) = json.loads(replaced.out)["images"]
    assert image["action"] == "build" and image["verification"]["ok"] and image["digest"] != before
    assert reg.digest(TAG) == image["digest"]
    again = lab.cli("ensure", TAG, "--ledger", ledger, "--verify-modules")
    assert again.code == 0 and f"{TAG}: present (" in again.out, again.out + again.err
    reg.close()


@pytest.mark.timeout(600)
def test_a_modules_only_image_under_a_precompiled_tag_is_wrong_with_the_reason(lab):
    """The modules pass every kernel check, but the image is the modules-only (KMM) layout: no nvidia-driver, no
    user space. The GPU Operator's pod could not start it, so `ensure --verify-modules` calls it wrong, and the
    lab's kernel loader crash-loops a driver pod on it with the same reason."""
    import gzip

    from gpualign.ensure import debian

    built = debian.cached_modules(Archive(), KERNEL)
    assert built is not None, "test_a_debian_node_joins… compiles these modules first"
    layer_tar = io.BytesIO()
    with tarfile.open(fileobj=layer_tar, mode="w") as tar:
        for ko in built.modules:
            tar.add(ko, arcname=f"opt/lib/modules/{KERNEL}/kernel/drivers/video/{ko.name}")
    raw = layer_tar.getvalue()
    layer = gzip.compress(raw, mtime=0)
    reg = client(lab.registry, "kmm/driver")
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": [f"DRIVER_VERSION={built.driver_version}"],
                                    "Labels": {"version": f"535-{KERNEL}"}},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + __import__("hashlib")
                                                                   .sha256(raw).hexdigest()]}}).encode()
    reg.push_manifest(TAG, {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": reg.push_blob(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": reg.push_blob(layer),
                    "size": len(layer)}]})
    reported = lab.cli("ensure", TAG, "--ledger", f"registry://{lab.registry}/kmm/driver", "--verify-modules",
                       timeout=300)
    assert reported.code == 1, reported.out + reported.err
    assert (f"{TAG}: present but wrong: the GPU Operator could not run it: it has no nvidia-driver on PATH "
            "(the GPU Operator's driver container runs `nvidia-driver init`)") in reported.err, reported.err


ARM64_KERNEL = "6.1.0-50-arm64"


@pytest.mark.timeout(1800)  # cold: a cross-compile against the arm64 headers (a few CPU-minutes), then cached
def test_an_arm64_node_gets_an_index_naming_linux_arm64_cross_compiled_and_verified_and_its_driver_comes_up(
        story_lab, tmp_path):
    """A Grace Hopper node on Debian 12's arm64 kernel: check says build; ensure compiles NVIDIA's arm64 module
    source across (an amd64 machine, Debian's aarch64 cross compiler) against the arm64 headers, checks the arm64
    user space under qemu-user, and pushes an image index naming linux/arm64 only. This test then reads the modules
    with the kernel's own tools against the arm64 kernel's Module.symvers, sees aarch64 ELF, and the lab's arm64
    node loads them. Before the push, Debian's own arm64 kernel, booted under qemu-system-aarch64, loaded them."""
    lab = story_lab
    kube = lab.kube()
    ledger = f"registry://{lab.registry}/nvidia/driver"
    tag = f"535-{ARM64_KERNEL}-debian12"
    added = lab.cli("lab", "add-node", "gh-1", "--kernel", ARM64_KERNEL, "--os", "debian12", "--branch", "535",
                    "--arch", "arm64")
    assert added.code == 0, added.err
    check = lab.cli("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=gh-1", "-o", "json")
    (missing,) = json.loads(check.out)["missing"]
    assert (missing["tag"], missing["action"]) == (tag, "build"), check.out

    res = lab.cli("ensure", tag, "--ledger", ledger, "-o", "json", timeout=1700)
    assert res.code == 0, res.out + res.err
    (image,) = json.loads(res.out)["images"]
    assert image["action"] == "build" and image["verification"]["ok"], res.out
    # the kernel decided: Debian's arm64 kernel, booted under qemu-system-aarch64, took the cross-compiled modules
    assert image["kernel_load"]["verdict"] == "accepted", image["kernel_load"]
    assert image["kernel_load"]["kernel"] == ARM64_KERNEL and "No NVIDIA GPU found" in image["kernel_load"]["said"][0]

    reg = client(lab.registry)
    index = reg.manifest(tag)
    reg.close()
    assert index is not None and [m["platform"] for m in index.get("manifests", [])] == [
        {"architecture": "arm64", "os": "linux"}], index
    config, _files = pulled_modules(lab.registry, index["manifests"][0]["digest"], tmp_path)
    assert config["architecture"] == "arm64" and config["os"] == "linux"
    kos = sorted(tmp_path.glob("*.ko"))
    assert {k.name for k in kos} >= {"nvidia.ko", "nvidia-uvm.ko", "nvidia-modeset.ko", "nvidia-drm.ko"}
    table = {}
    for line in Archive.for_kernel(ARM64_KERNEL).symvers(ARM64_KERNEL).read_text().splitlines():
        crc, sym = line.split("\t")[:2]
        table[sym] = int(crc, 16)
    own = {s for k in kos for s in subprocess.run(["nm", str(k)], capture_output=True, text=True).stdout.split()
           if s.startswith("__ksymtab_")}
    checked = 0
    for ko in kos:
        assert ko.read_bytes()[18:20] == (183).to_bytes(2, "little"), f"{ko.name} is not aarch64 ELF"  # EM_AARCH64
        assert modinfo(ko, "vermagic").split()[0] == ARM64_KERNEL
        for sym, crc in modversions(ko).items():
            if sym in table:
                assert table[sym] == crc, f"{ko.name}: {sym}"
                checked += 1
            else:
                assert f"__ksymtab_{sym}" in own, f"{ko.name}: {sym} exported by nobody"
    assert checked > 500
    # the same modules on the amd64 kernel of the same ABI: refused for their architecture first, as insmod would
    amd64 = symvers_mod.parse(Archive().symvers(KERNEL).read_text(), KERNEL)
    refused = verify([kmod.read_file(k) for k in kos], KERNEL, amd64, modinfo(kos[0], "version"))
    assert not refused.ok and "Invalid architecture in ELF header (arm64 module" in (refused.first_refusal() or "")

    wait_for(lambda: driver_ready(kube, "gh-1"), timeout=90, what="gh-1's driver pod Ready on the arm64 image")
    reg = client(lab.registry)
    loaded = kernel_load.load(reg, tag, ARM64_KERNEL, "")  # what the lab's kernel decided for gh-1: checked, not
    reg.close()  # tag-only
    assert loaded.loaded and loaded.checked and f"symbol CRCs match {ARM64_KERNEL}" in loaded.message, loaded
