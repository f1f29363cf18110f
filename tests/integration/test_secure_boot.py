"""Secure Boot, end to end on the lab: `gpualign ensure --sign-key/--sign-cert` signs the real NVIDIA modules with
the kernel's own sign-file, and nodes marked Secure Boot load them only if they hold the signing certificate.

The oracle is independent of gpualign's code: modinfo (kmod) names the signer and key id, and `openssl cms -verify`
verifies each module's detached PKCS#7 over the module's bytes, with the certificate given on the command line.

The modules are the cached ones of the one real build (tests/integration/test_ensure_build.py compiles them on a
cold machine; this test compiles them itself if it runs first)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from gpualign.archive.apt import Archive
from gpualign.ensure import debian
from tests.support.ensure_build import KERNEL, TAG, client, pulled_modules
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

MAGIC = b"~Module signature appended~\n"


def keypair(where: Path, name: str, cn: str) -> tuple[Path, Path]:
    key, cert = where / f"{name}.key", where / f"{name}.crt"
    subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj",
                    f"/CN={cn}/O=gpualign tests", "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True)
    return key, cert


def forget_signed(cert: Path) -> None:
    """Remove the signed copies this test's throw-away key left in the module cache (about 67 MB a run)."""
    import shutil

    from gpualign.loaders.archive_reading import ensure_root

    fp = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256"],
                        capture_output=True, text=True, check=True).stdout.strip().split("=", 1)[1]
    for d in ensure_root().glob(f"modules/*/*/*/signed-{fp.replace(':', '').lower()[:16]}"):
        shutil.rmtree(d)


def serial(cert: Path) -> str:
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-serial"], capture_output=True, text=True,
                         check=True).stdout.strip().split("=", 1)[1]
    out = out if len(out) % 2 == 0 else "0" + out
    return ":".join(out[i:i + 2] for i in range(0, len(out), 2)).upper()


def split(ko: bytes) -> tuple[bytes, bytes]:
    """(the module's bytes before the signature, the PKCS#7), by the layout sign-file appends."""
    assert ko.endswith(MAGIC), "not signed"
    sig_len = struct.unpack(">I", ko[-len(MAGIC) - 4:-len(MAGIC)])[0]
    end = len(ko) - len(MAGIC) - 12
    return ko[:end - sig_len], ko[end - sig_len:end]


def cms_verifies(payload: bytes, pkcs7: bytes, cert: Path, tmp: Path) -> bool:
    (tmp / "payload").write_bytes(payload)
    (tmp / "sig.p7").write_bytes(pkcs7)
    res = subprocess.run(["openssl", "cms", "-verify", "-binary", "-inform", "DER", "-in", str(tmp / "sig.p7"),
                          "-content", str(tmp / "payload"), "-certfile", str(cert), "-nointern", "-noverify",
                          "-out", "/dev/null"], capture_output=True, text=True)
    return res.returncode == 0 and "Verification successful" in res.stderr


def modinfo(ko: Path, field: str) -> str:
    return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def sb_lab(tmp_path):
    lab = start_lab(tmp_path / "state")
    yield lab
    lab.cli("lab", "down")


def driver_pod(kube, node: str) -> dict | None:
    pods = [p for p in kube.pods(label_selector="app.kubernetes.io/component=nvidia-driver")
            if p["spec"].get("nodeName") == node]
    return pods[0] if pods else None


def ready(kube, node: str) -> dict | None:
    p = driver_pod(kube, node)
    return p if p and any(c["type"] == "Ready" and c["status"] == "True"
                          for c in (p.get("status") or {}).get("conditions") or []) else None


def crash_message(kube, node: str) -> str | None:
    p = driver_pod(kube, node)
    statuses = ((p or {}).get("status") or {}).get("containerStatuses") or []
    if not statuses or ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") != "CrashLoopBackOff":
        return None
    return str(statuses[0]["lastState"]["terminated"]["message"])


@pytest.mark.timeout(1800)
def test_signed_modules_load_only_where_their_key_is_enrolled(sb_lab, tmp_path):
    lab = sb_lab
    kube = lab.kube()
    unsigned = debian.compile_modules(Archive(), KERNEL).directory  # cached after the one real build
    key_a, cert_a = keypair(tmp_path, "a", "gpualign fleet key A")
    _, cert_b = keypair(tmp_path, "b", "another fleet key B")
    ledger = f"registry://{lab.registry}/nvidia/driver"
    try:
        walk_through(lab, kube, unsigned, ledger, key_a, cert_a, cert_b, tmp_path)
    finally:
        forget_signed(cert_a)


def walk_through(lab, kube, unsigned: Path, ledger: str, key_a: Path, cert_a: Path, cert_b: Path,
                 tmp_path: Path) -> None:

    # 1. the unsigned image: a plain node loads it; a Secure Boot node refuses it, as the kernel does
    assert lab.cli("ensure", TAG, "--ledger", ledger, "--modules-from", str(unsigned), timeout=600).code == 0
    for node, certs in (("deb-plain", []), ("deb-sb-a", ["--secure-boot-cert", str(cert_a)])):
        assert lab.cli("lab", "add-node", node, "--kernel", KERNEL, "--os", "debian12", "--branch", "535",
                       *certs).code == 0
    wait_for(lambda: ready(kube, "deb-plain"), timeout=120, what="deb-plain's driver pod Ready (no Secure Boot)")
    message = wait_for(lambda: crash_message(kube, "deb-sb-a"), timeout=120, what="deb-sb-a refusing unsigned")
    assert message == ("insmod: ERROR: could not insert module nvidia.ko: Key was rejected by service; kernel: "
                       "nvidia: Loading of unsigned module is rejected (Key was rejected by service)"), message

    # 2. ensure signs with key A (into a second repository), verified before the push
    signed_ledger = f"registry://{lab.registry}/signed/driver"
    res = lab.cli("ensure", TAG, "--ledger", signed_ledger, "--modules-from", str(unsigned), "--sign-key",
                  str(key_a), "--sign-cert", str(cert_a), "-o", "json", timeout=600)
    assert res.code == 0, res.err
    (image,) = json.loads(res.out)["images"]
    v = image["verification"]
    assert v["ok"] and v["signatures_checked"] and v["modules"] == len(v["per_module"]) >= 4
    assert {(m["signer"], m["key_id"], m["signature_ok"]) for m in v["per_module"]} == \
        {("gpualign fleet key A", serial(cert_a), True)}
    config, _ = pulled_modules_from(lab.registry, "signed/driver", tmp_path / "signed")
    labels = config["config"]["Labels"]
    assert labels["io.gpualign.signer"] == "gpualign fleet key A"
    assert labels["io.gpualign.signing-key-id"] == serial(cert_a)

    # the oracle: modinfo names the signer and key; openssl verifies every signature with A, none with B
    modules = sorted((tmp_path / "signed").glob("*.ko"))
    assert {m.name for m in modules} >= {"nvidia.ko", "nvidia-uvm.ko", "nvidia-modeset.ko", "nvidia-drm.ko"}
    for ko in modules:
        assert modinfo(ko, "sig_id") == "PKCS#7" and modinfo(ko, "signer") == "gpualign fleet key A", ko
        assert modinfo(ko, "sig_key") == serial(cert_a), ko
        assert modinfo(ko, "sig_hashalgo") == "sha256", ko  # Debian's CONFIG_MODULE_SIG_HASH
        payload, pkcs7 = split(ko.read_bytes())
        assert payload == (unsigned / ko.name).read_bytes(), f"{ko.name}: signing changed the module itself"
        assert cms_verifies(payload, pkcs7, cert_a, tmp_path), ko
        assert not cms_verifies(payload, pkcs7, cert_b, tmp_path), ko

    # the kernel decided too: Debian's signed kernel booted under UEFI Secure Boot (OVMF) with A in its MOK list,
    # locked down, and loaded what A signed
    assert image["kernel_load"]["verdict"] == "accepted", image["kernel_load"]
    assert image["kernel_load"]["secure_boot"] == {"lockdown": "integrity", "trusted": ["gpualign fleet key A"]}
    assert json.loads(labels["io.gpualign.verified"])["kernel_load"]["secure_boot"]["lockdown"] == "integrity"
    again = lab.cli("ensure", TAG, "--ledger", signed_ledger, "--sign-key", str(key_a), "--sign-cert", str(cert_a))
    assert again.code == 0 and f"{TAG}: present (" in again.out  # idempotent

    # 3. the admin puts the signed image under the tag the nodes pull: the Secure Boot node with A loads it ...
    copied = subprocess.run(["skopeo", "copy", "--all", "--src-tls-verify=false", "--dest-tls-verify=false",
                             f"docker://{lab.registry}/signed/driver:{TAG}",
                             f"docker://{lab.registry}/nvidia/driver:{TAG}"], capture_output=True, text=True)
    assert copied.returncode == 0, copied.stderr
    wait_for(lambda: ready(kube, "deb-sb-a"), timeout=120, what="deb-sb-a loading the modules signed by A")

    # ... and one that enrolled only B refuses them: the kernel does not hold A
    assert lab.cli("lab", "add-node", "deb-sb-b", "--kernel", KERNEL, "--os", "debian12", "--branch", "535",
                   "--secure-boot-cert", str(cert_b)).code == 0
    message = wait_for(lambda: crash_message(kube, "deb-sb-b"), timeout=120, what="deb-sb-b refusing A's key")
    assert message.startswith("insmod: ERROR: could not insert module nvidia.ko: Key was rejected by service; "
                              "kernel: nvidia: Loading of module with unavailable key is rejected"), message
    assert f"signed by gpualign fleet key A, key {serial(cert_a)}" in message
    assert client(lab.registry).digest(TAG) == client(lab.registry, "signed/driver").digest(TAG)

    # 4. the same kernel, booted under Secure Boot, refuses the unsigned image with A enrolled, and A's modules
    # where only B is, in its words (after the nodes' steps: a VM boot is tens of seconds the crash-looping pods
    # above would spend in back-off)
    unsigned_ref = f"{lab.registry}/unsigned/driver:{TAG}"
    assert lab.cli("ensure", TAG, "--ledger", f"registry://{lab.registry}/unsigned/driver", "--modules-from",
                   str(unsigned), "--no-kernel-load", timeout=600).code == 0
    refused = lab.cli("verify", unsigned_ref, "--secure-boot-cert", str(cert_a), "-o", "json", timeout=600)
    assert refused.code == 1, refused.out + refused.err
    assert json.loads(refused.out)["said"] == ["Loading of unsigned module is rejected",
                                               "insmod: can't insert '/m/nvidia.ko': Key was rejected by service"]
    foreign = lab.cli("verify", f"{lab.registry}/signed/driver:{TAG}", "--secure-boot-cert", str(cert_b),
                      timeout=600)
    assert foreign.code == 1 and "Loading of module with unavailable key is rejected" in foreign.out, foreign.out
    assert "under Secure Boot (lockdown integrity, trusting another fleet key B)" in foreign.out


def pulled_modules_from(registry: str, repo: str, into: Path) -> tuple[dict, list[str]]:
    into.mkdir(parents=True, exist_ok=True)
    return pulled_modules(registry, TAG, into, repo=repo)


@pytest.mark.timeout(120)
def test_signing_input_is_checked_before_any_work(sb_lab, tmp_path):
    lab = sb_lab
    key_a, cert_a = keypair(tmp_path, "a", "A")
    _, cert_b = keypair(tmp_path, "b", "B")
    ledger = f"registry://{lab.registry}/nvidia/driver"
    cases = [
        (["--sign-key", str(key_a)], "gpualign: error: --sign-key and --sign-cert go together"),
        (["--sign-key", str(key_a), "--sign-cert", str(cert_b)],
         f"gpualign: error: --sign-key {key_a} / --sign-cert {cert_b}: the signing key is not the certificate's key"),
        (["--sign-key", str(tmp_path / "nope.key"), "--sign-cert", str(cert_a)],
         f"gpualign: error: --sign-key {tmp_path / 'nope.key'}: no such file"),
        (["--sign-secret", "kube-system/absent"], "gpualign: error: --sign-secret kube-system/absent: no such Secret"),
        (["--sign-secret", "just-a-name"], "gpualign: error: --sign-secret 'just-a-name': expected NAMESPACE/NAME"),
    ]
    for extra, first in cases:
        res = lab.cli("ensure", TAG, "--ledger", ledger, *extra)
        assert res.code == 2 and res.err.strip().startswith(first) and "Traceback" not in res.err, (extra, res.err)
        assert len(res.err.strip().splitlines()) == 1
    assert client(lab.registry).digest(TAG) is None  # nothing pushed

    # a Secret on the cluster, as KMM keeps a signing key (data keys key and cert)
    import base64

    lab.kube().apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-signing",
                                                                          "namespace": "kube-system"},
                      "data": {"key": base64.b64encode(key_a.read_bytes()).decode(),
                               "cert": base64.b64encode(cert_a.read_bytes()).decode()}})
    dry = lab.cli("ensure", TAG, "--ledger", ledger, "--sign-secret", "kube-system/fleet-signing", "--dry-run")
    assert dry.code == 0 and f"{TAG}: would build" in dry.out, dry.err


@pytest.mark.timeout(900)
def test_the_walk_never_cordons_a_secure_boot_node_for_unsigned_modules_nor_builds_them_unsigned(sb_lab, tmp_path):
    """An unsigned image (labels intact, modules that fit the kernel) is the target of a Secure Boot node: the walk's
    preflight holds the node uncordoned, naming the unsigned module, and its GPU pod is left alone. `upgrade
    --ensure` for such a node refuses to build without a signing key."""
    from tests.support.ensure_build import gpu_workload_on

    lab = sb_lab
    kube = lab.kube()
    unsigned = debian.compile_modules(Archive(), KERNEL).directory  # cached after the one real build
    _, cert_a = keypair(tmp_path, "a", "gpualign fleet key A")
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("ensure", TAG, "--ledger", ledger, "--modules-from", str(unsigned), timeout=600).code == 0
    assert lab.cli("lab", "push-image", f"580-{KERNEL}-debian12").code == 0
    assert lab.cli("lab", "add-node", "deb-sb", "--kernel", KERNEL, "--os", "debian12", "--branch", "580",
                   "--driver", "580.95.05", "--secure-boot-cert", str(cert_a)).code == 0
    assert kube.get("/api/v1/nodes/deb-sb")["metadata"]["labels"]["gpualign.io/secure-boot"] == "enabled"
    workload = gpu_workload_on(kube, "deb-sb", "sb-trainer")
    selector = ("-l", "kubernetes.io/hostname=deb-sb")

    walk = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--yes", timeout=300)
    assert walk.code == 1, walk.out + walk.err
    node = kube.get("/api/v1/nodes/deb-sb")
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required"
    assert not node["spec"].get("unschedulable")
    blocker = node["metadata"]["annotations"]["gpualign.io/upgrade-blocker"]
    assert blocker.startswith(f"image present but wrong: {TAG}: its modules would not load on {KERNEL}: nvidia: "
                              "module is not signed, and the node has Secure Boot on"), blocker
    still = kube.get(f"/api/v1/namespaces/default/pods/{workload['metadata']['name']}")
    assert still is not None and still["metadata"]["uid"] == workload["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")
    # labels alone (no module check) still know gpualign built it unsigned
    quick = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", ledger, "--no-verify-modules",
                    "--dry-run")
    assert quick.code == 1 and "gpualign built it unsigned" in quick.out, quick.out

    # --ensure, into a repository that lacks the image, refuses to build it unsigned for this node
    empty = f"registry://{lab.registry}/sb/driver"
    refused = lab.cli("upgrade", *selector, "--to-branch", "535", "--ledger", empty, "--ensure", "--yes",
                      timeout=120)
    assert refused.code == 2, refused.out + refused.err
    assert f"--ensure: {TAG} is for Secure Boot node(s) deb-sb" in refused.err and "--sign-key" in refused.err
    assert client(lab.registry, "sb/driver").digest(TAG) is None
    assert not kube.get("/api/v1/nodes/deb-sb")["spec"].get("unschedulable")
