#!/usr/bin/env python3
"""`make demo`: the seed's story in the lab, narrated step by step, with real commands and their real output.

Runs in its own lab (state in ~/.local/state/gpualign/demo) and stops it at the end unless --keep.
Exit 0 when every step behaved as the story says; otherwise exit 1 naming the step.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "gpualign" / "demo"
BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")
NEW_KERNEL = "5.15.0-125-generic"
NEW_TAG = f"580-{NEW_KERNEL}-ubuntu22.04"


class StoryBroken(Exception):
    pass


def say(text: str) -> None:
    print(f"\n{BOLD}{text}{RESET}", flush=True)


def run(*cmd: str, expect: int | None = 0, input: str | None = None,
        show: bool = True, echo: bool = True) -> subprocess.CompletedProcess[str]:
    """echo=False: a silent probe (the demo's polling), neither the command nor its output shown."""
    shown = " ".join(shlex.quote(c) for c in cmd)
    if echo:
        print(f"{DIM}${RESET} {shown}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, input=input, env=ENV)
    if show:
        out = (proc.stdout + proc.stderr).rstrip()
        if out:
            print(out, flush=True)
    if expect is not None and proc.returncode != expect:
        raise StoryBroken(f"`{shown}` exited {proc.returncode}, expected {expect}")
    return proc


def gpualign(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "-m", "gpualign", *args, **kw)  # type: ignore[arg-type]


ENV = dict(os.environ)

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: ml
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: main
        image: nvcr.io/nvidia/cuda:{cuda}-base-ubuntu22.04
        resources:
          limits: {{nvidia.com/gpu: 1}}
"""


def story() -> None:
    ledger = "registry://" + ENV["GPUALIGN_LAB_REGISTRY"] + "/nvidia/driver"
    kubectl = str(Path(ENV["GPUALIGN_LAB_BIN"]) / "kubectl")

    say("1. The fleet, as its labels describe it: kernel and OS from Node Feature Discovery.")
    run(kubectl, "get", "nodes", "-L", "feature.node.kubernetes.io/kernel-version.full",
        "-L", "feature.node.kubernetes.io/system-os_release.VERSION_ID", "-L", "nvidia.com/cuda.driver-version.full")

    say("2. The ledger check: every GPU node's required driver image is in the in-house registry.")
    gpualign("check", "--ledger", ledger)

    say("3. A kernel patch is planned for the a-pool. Before rolling it out: what must be built?")
    gpualign("plan", "-l", "kubernetes.io/hostname in (gpu-a1,gpu-a2)", "--kernel", NEW_KERNEL,
             "--ledger", ledger, "--build-matrix", expect=1)

    say("4. Nobody built it, and a new node arrives with that kernel. Only its driver pod fails to pull;")
    say("   no cluster alarm rings. gpualign check names exactly that node and that tag.")
    gpualign("lab", "add-node", "gpu-new", "--kernel", NEW_KERNEL)
    time.sleep(3)
    out = gpualign("check", "--ledger", ledger, expect=1).stdout
    if "ImagePullBackOff" not in out:
        raise StoryBroken("the new node's driver pod should show ImagePullBackOff")

    say("5. Build and push the image: the pull is retried, the driver loads, the check is clean again.")
    gpualign("lab", "push-image", NEW_TAG)
    deadline = time.monotonic() + 30
    while run(sys.executable, "-m", "gpualign", "check", "--ledger", ledger, expect=None,
              show=False).returncode != 0:
        if time.monotonic() > deadline:
            raise StoryBroken("check did not become clean after pushing the image")
        time.sleep(1)
    gpualign("check", "--ledger", ledger)

    say("6. CUDA is forward-compatible only. Write the requirement into the spec as nodeAffinity:")
    gpualign("cuda", "affinity", "--cuda", "12.8", "--labels", "current")
    for name, cuda in (("cuda-12-8", "12.8"), ("cuda-13-2", "13.2")):
        injected = gpualign("cuda", "inject", "--cuda", cuda, "-f", "-",
                            input=DEPLOYMENT.format(name=name, cuda=cuda), show=False)
        run(kubectl, "apply", "-f", "-", input=injected.stdout)
    say("   The fleet runs 580.173.02: CUDA 12.8 (needs 570.26) schedules; 13.2 (needs 595.45.04) is refused by")
    say("   the scheduler, at scheduling time, instead of failing on a node.")
    deadline = time.monotonic() + 30
    while True:
        pods = run(kubectl, "get", "pods", "-n", "ml", "-l", "app in (cuda-12-8,cuda-13-2)", "-o",
                   "custom-columns=POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName", show=False).stdout
        events = run(kubectl, "get", "events", "-n", "ml", "--field-selector", "reason=FailedScheduling",
                     "-o", "custom-columns=OBJECT:.involvedObject.name,MESSAGE:.message", show=False).stdout
        if "cuda-13-2" in events and "Running" in pods:
            break
        if time.monotonic() > deadline:
            raise StoryBroken("expected cuda-12-8 Running and a FailedScheduling event for cuda-13-2")
        time.sleep(1)
    print(pods.rstrip())
    print(events.rstrip())
    gpualign("cuda", "check", "--cuda", "13.2", expect=1)

    say("7. Loading a new driver means moving GPU work off first. A PodDisruptionBudget can refuse that.")
    say("   First the plain way, kubectl drain:")
    node = run(kubectl, "get", "pods", "-n", "ml", "-l", "app=trainer", "-o",
               "jsonpath={.items[0].spec.nodeName}", show=False).stdout.strip()
    run(kubectl, "get", "pdb", "-n", "ml")
    drain = run(kubectl, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                "--pod-selector=app=trainer", "--timeout=10s", expect=None)
    if drain.returncode == 0 or "disruption budget" not in drain.stderr:
        raise StoryBroken("kubectl drain should have been refused by the PDB")
    say(f"   kubectl drain gave up, and left {node} cordoned: no new pods, and no new driver either.")
    run(kubectl, "get", "node", node)
    run(kubectl, "uncordon", node)

    say("8. Now the safe way. Branch 595's images are built for every pool (the gcp one in-house), and an admin")
    say("   has cordoned gpu-c1 for unrelated reasons. The preflight checks images and PDBs before touching a node:")
    for pool in ("5.15.0-124-generic-ubuntu22.04", f"{NEW_KERNEL}-ubuntu22.04", "6.8.0-48-generic-ubuntu24.04",
                 "6.8.0-1015-aws-ubuntu22.04", "6.8.0-1017-azure-ubuntu24.04", "6.8.0-1015-gcp-ubuntu22.04"):
        gpualign("lab", "push-image", f"595-{pool}", show=False)
    run(kubectl, "cordon", "gpu-c1")
    gpualign("upgrade", "--to-branch", "595", "--ledger", ledger, "--dry-run", expect=1)

    say("9. Start the walk. The trainer's PDB allows no disruption, so gpualign never cordons its two nodes: they stay")
    say("   schedulable at upgrade-required, the PDB named on them, in an Event and here, while every other node")
    say("   is upgraded around them. (--timeout: wait for the PDB instead of ending when only held nodes remain.)")
    walk = subprocess.Popen([sys.executable, "-m", "gpualign", "upgrade", "--to-branch", "595", "--ledger", ledger,
                             "--yes", "--timeout", "600"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert walk.stdout is not None
    held, done = None, 0
    for line in walk.stdout:
        print(f"   {line.rstrip()}", flush=True)
        if "waiting before cordon: PDB" in line and held is None:
            held = line.split()[1].rstrip(":")
        done += "→ upgrade-done" in line
        if held and done >= 5:  # every node the PDB does not guard
            break
    if held is None:
        raise StoryBroken("the walk should have held the trainer's nodes before cordon")
    gpualign("status", "--ledger", ledger, "--to-branch", "595")
    gpualign("why", held, "--ledger", ledger, "--to-branch", "595")

    say("10. The training team relaxes its PDB (or scales up). The held nodes are admitted one at a time:")
    run(kubectl, "patch", "pdb", "-n", "ml", "trainer-pdb", "--type", "merge", "-p", '{"spec":{"minAvailable":1}}')
    for line in walk.stdout:
        print(f"   {line.rstrip()}", flush=True)
    if walk.wait() != 0:
        raise StoryBroken("the upgrade did not finish with every node upgrade-done")
    say("11. Every node runs the 595 driver; only the nodes the upgrade cordoned were uncordoned:")
    run(kubectl, "get", "nodes", "-L", "nvidia.com/gpu-driver-upgrade-state", "-L",
        "nvidia.com/cuda.driver-version.full")


def ensure_story() -> None:
    ledger = "registry://" + ENV["GPUALIGN_LAB_REGISTRY"] + "/nvidia/driver"
    kubectl = str(Path(ENV["GPUALIGN_LAB_BIN"]) / "kubectl")
    tag = "535-6.1.0-50-amd64-debian12"
    say("12. Build the missing combination in advance, for real. A Debian 12 node joins on 6.1.0-50-amd64, Debian's")
    say("    security update, with NVIDIA 535. Nobody publishes its precompiled image: check says build.")
    gpualign("lab", "add-node", "deb-1", "--kernel", "6.1.0-50-amd64", "--os", "debian12", "--branch", "535")
    time.sleep(3)
    report = gpualign("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1", "-o", "wide", expect=1)
    if tag not in report.stdout or "build" not in report.stdout:
        raise StoryBroken(f"check should flag {tag} with action build")
    say("    gpualign ensure builds it from NVIDIA's module source in Debian's archive against that kernel's headers,")
    say("    checks every module as the kernel would at load (vermagic, 700+ symbol CRCs against Module.symvers),")
    say("    then boots Debian's own 6.1.0-50 kernel in a VM and loads the modules into it, and only then pushes it")
    say("    (the first time on a machine, the compile takes a few CPU-minutes):")
    as_json = gpualign("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1", "-o", "json", expect=1,
                       show=False, echo=False)
    print(f"{DIM}${RESET} gpualign check -l kubernetes.io/hostname=deb-1 -o json | gpualign ensure --from - "
          f"--ledger {ledger}", flush=True)
    gpualign("ensure", "--from", "-", "--ledger", ledger, input=as_json.stdout, echo=False)
    wait("deb-1's driver pod Ready", lambda: "Running" in run(
        kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-1", "-o",
        "jsonpath={.items[*].status.phase}", show=False, echo=False).stdout, timeout=60)
    gpualign("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb-1")
    run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-1", "-o", "wide")
    say("    The kernel decides, for any image: its own kernel booted with its modules, NVIDIA's words the pass:")
    loaded = gpualign("verify", ENV["GPUALIGN_LAB_REGISTRY"] + f"/nvidia/driver:{tag}")
    if "accepted the modules" not in loaded.stdout or "No NVIDIA GPU found" not in loaded.stdout:
        raise StoryBroken(f"the kernel should accept {tag}'s modules")
    dropin_story(tag)
    mistagged_story(ledger, kubectl, tag)
    unattended_story(ledger, kubectl, tag)
    debian13_story(ledger, kubectl)


def debian13_story(ledger: str, kubectl: str) -> None:
    """The seed's pool migration ("move a node pool from 22.04 to 24.04"), on Debian: 12 to 13, whose driver is 550."""
    move = ("--os", "debian13", "--kernel", "6.12.118+deb13-amd64", "--driver-branch", "550")
    say("15. The Debian pool moves to Debian 13 (trixie): a new release, its 6.12 kernel, and Debian's driver for it,")
    say("    NVIDIA 550. The GPU Operator publishes nothing for Debian 13. Before a node moves, plan lists what the")
    say("    pool will need, with the kernel as NFD will label it (`_` where the release has `+`):")
    gpualign("plan", "-l", "kubernetes.io/hostname=deb-1", *move, "--ledger", ledger, expect=1)
    say("    ensure builds it from the plan, from Debian 13's own archive: its headers, its module source, its user")
    say("    space, verified against that kernel's Module.symvers:")
    as_json = gpualign("plan", "-l", "kubernetes.io/hostname=deb-1", *move, "--ledger", ledger, "-o", "json",
                       expect=1, show=False, echo=False)
    print(f"{DIM}${RESET} gpualign plan -l kubernetes.io/hostname=deb-1 {' '.join(move)} --ledger {ledger} -o json "
          f"| gpualign ensure --from - --ledger {ledger}", flush=True)
    gpualign("ensure", "--from", "-", "--ledger", ledger, input=as_json.stdout, echo=False)
    say("    The first node of the moved pool joins: labelled as NFD labels it (6.12.118_deb13-amd64), running the")
    say("    release 6.12.118+deb13-amd64. Its driver pod pulls the image and its modules load on the first try:")
    gpualign("lab", "add-node", "deb13-1", "--kernel", "6.12.118_deb13-amd64", "--os", "debian13", "--branch", "550")
    wait("deb13-1's driver pod Running", lambda: "Running" in run(
        kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb13-1", "-o",
        "jsonpath={.items[*].status.phase}", show=False, echo=False).stdout, timeout=60)
    run(kubectl, "get", "node", "deb13-1", "-o", "jsonpath={.status.nodeInfo.kernelVersion}{\"\\n\"}")
    gpualign("check", "--ledger", ledger, "-l", "kubernetes.io/hostname=deb13-1")
    say("    Left to the controller, the same happens unattended: a node that announces its move")
    say("    (gpualign.io/os.next=debian-13, gpualign.io/kernel.next=6.12.118_deb13-amd64) gets its image built")
    say("    before it reboots (docs/controller.md, \"Built ahead of the next kernel\").")


def dropin_story(tag: str) -> None:
    import json

    node = json.loads(gpualign("lab", "status", "-o", "json", show=False, echo=False).stdout).get("realNode")
    say("    deb-1 is simulated. The image is NVIDIA's kind of driver container: the GPU Operator's own pod spec")
    say("    runs `nvidia-driver init` from it. On the lab's real node (a kubelet, whose kernel is not 6.1.0-50),")
    say("    init runs up to gpualign's kernel check and stops there, in one line:")
    if not node:
        say("    (this machine gave the lab no real node: see `gpualign lab up --help`; step skipped)")
        return
    gpualign("lab", "run-driver", tag)


def mistagged_story(ledger: str, kubectl: str, built: str) -> None:
    import json

    registry = ENV["GPUALIGN_LAB_REGISTRY"]
    wrong = "535-6.1.0-47-amd64-debian12"
    say("13. Present but wrong. A CI job pushes 6.1.0-50's image under 6.1.0-47's tag. To every tool that asks only")
    say("    whether a tag exists, the 6.1.0-47 fleet looks ready. Before any such node is touched, check reads the")
    say("    image's labels (and with --verify-modules its modules, as the node's kernel would load them):")
    # (as Docker's manifest format: a manifest of its own, so pruning one tag's image later leaves the other)
    run("skopeo", "copy", "--format", "v2s2", "--src-tls-verify=false", "--dest-tls-verify=false",
        f"docker://{registry}/nvidia/driver:{built}", f"docker://{registry}/nvidia/driver:{wrong}", show=False)
    import tempfile

    planned = Path(tempfile.mkdtemp(prefix="gpualign-demo-")) / "planned-node.json"
    planned.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "deb-2", "labels": {
            "feature.node.kubernetes.io/kernel-version.full": "6.1.0-47-amd64",
            "feature.node.kubernetes.io/system-os_release.ID": "debian",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "12",
            "nvidia.com/gpu.present": "true"}}}]}))
    gpualign("check", "--nodes-file", str(planned), "--driver-branch", "535", "--ledger", ledger,
             "--verify-modules", "-o", "wide", expect=1)
    planned.unlink()
    planned.parent.rmdir()
    say("    The node joins anyway. Its driver pod pulls the tag, and the kernel refuses the modules, in its words:")
    gpualign("lab", "add-node", "deb-2", "--kernel", "6.1.0-47-amd64", "--os", "debian12", "--branch", "535")

    def crashing() -> str:
        out = run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-2", "-o",
                  "jsonpath={.items[*].status.containerStatuses[0].state.waiting.reason}", show=False,
                  echo=False).stdout
        return out if "CrashLoopBackOff" in out else ""

    wait("deb-2's driver pod crash-looping", crashing, timeout=60)
    run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-2")
    run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-2", "-o",
        "jsonpath={.items[0].status.containerStatuses[0].lastState.terminated.message}")
    print(flush=True)


def unattended_story(ledger: str, kubectl: str, tag: str) -> None:
    import json
    import tempfile

    node = json.loads(gpualign("lab", "status", "-o", "json", show=False, echo=False).stdout).get("realNode")
    say("14. Kernel to GPU, with nobody typing. Say a retention policy prunes 535-6.1.0-50-amd64-debian12 from the")
    say("    ledger, and a third Debian node joins on that kernel. The chart's controller runs with builds on: it")
    say("    starts one Job, which runs gpualign's builder image on the real node, takes the modules chapter 12")
    say("    compiled from the registry (ensure shared them there), verifies them against the kernel, assembles and")
    say("    pushes the image. Nobody types anything after the node joins:")
    if not node:
        say("    (this machine gave the lab no real node: see `gpualign lab up --help`; chapter skipped)")
        return
    registry = ENV["GPUALIGN_LAB_REGISTRY"]
    digest = run("skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                 f"docker://{registry}/nvidia/driver:{tag}", show=False, echo=False).stdout.strip()
    run("skopeo", "delete", "--tls-verify=false", f"docker://{registry}/nvidia/driver@{digest}", show=False)
    gpualign("lab", "push-self", "--builder", show=False)
    values = Path(tempfile.mkdtemp(prefix="gpualign-demo-")) / "values.yaml"
    values.write_text(gpualign("lab", "chart-values", show=False, echo=False).stdout)
    from gpualign.lab import versions

    helm = str(versions.helm_binary(Path(ENV["GPUALIGN_LAB_BIN"])))
    run(helm, "install", "ga", str(ROOT / "charts" / "gpualign"), "-n", "gpualign-system", "--create-namespace",
        "-f", str(values), "--set", "builds.enabled=true", "--set", "ledgerRefreshSeconds=5", "--wait", "--timeout",
        "180s", show=False)
    started = time.monotonic()
    gpualign("lab", "add-node", "deb-3", "--kernel", "6.1.0-50-amd64", "--os", "debian12", "--branch", "535")

    def job() -> str:
        return run(kubectl, "get", "jobs", "-n", "gpualign-builds", "-l", "gpualign.io/build=true", "-o",
                   "jsonpath={.items[*].metadata.name}", show=False, echo=False, expect=None).stdout.strip()

    wait("the build Job", job, timeout=60)
    run(kubectl, "get", "jobs", "-n", "gpualign-builds", "-l", "gpualign.io/build=true", "-o", "wide")
    gpualign("why", "deb-3", "--ledger", ledger)

    def ready() -> bool:
        return "true" in run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-3",
                             "-o", "jsonpath={.items[*].status.containerStatuses[0].ready}", show=False,
                             echo=False).stdout

    wait("deb-3's driver pod Ready", ready, timeout=600)
    took = time.monotonic() - started
    gpualign("build", "list")
    pod = run(kubectl, "get", "pods", "-n", "gpualign-builds", "-l", f"job-name={job()}", "-o",
              "jsonpath={.items[0].metadata.name}", show=False, echo=False).stdout
    log = run(kubectl, "logs", "-n", "gpualign-builds", pod, show=False, echo=False).stdout.splitlines()
    print("\n".join(line for line in log if "shared modules" in line or "verified" in line or "pushed" in line),
          flush=True)
    run(kubectl, "get", "pods", "-n", "gpu-operator", "--field-selector", "spec.nodeName=deb-3", "-o", "wide")
    say(f"    deb-3 joined and its driver pod was Ready {took:.0f} s later, on an image verified for its kernel.")
    run(helm, "uninstall", "ga", "-n", "gpualign-system", "--wait", show=False)
    values.unlink()
    values.parent.rmdir()


def _metric(port: int, name: str) -> float | None:
    """One of the controller's metrics, or None before it serves them."""
    import re
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    m = re.search(rf"(?m)^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text)
    return float(m.group(1)) if m else None


def wait(what: str, check: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise StoryBroken(f"timed out waiting for {what}")
        time.sleep(0.5)


def load_env() -> None:
    for line in gpualign("lab", "env", show=False).stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        ENV[key] = value.replace("$PATH", os.environ.get("PATH", ""))


def node_labels(name: str) -> dict[str, str]:
    import json

    out = run(str(Path(ENV["GPUALIGN_LAB_BIN"]) / "kubectl"), "get", "node", name, "-o", "json", show=False,
              echo=False).stdout
    return json.loads(out)["metadata"].get("labels") or {}


def operator_story() -> None:
    import json

    kubectl = str(Path(ENV["GPUALIGN_LAB_BIN"]) / "kubectl")
    state, skip, driver = ("nvidia.com/gpu-driver-upgrade-state", "nvidia.com/gpu-driver-upgrade.skip",
                           "nvidia.com/cuda.driver-version.full")
    say("16. The people who need gpualign run NVIDIA's GPU Operator. Here is the real one, built from its Go module,")
    say("    running beside the lab: one NVIDIADriver per pool (train 580, infer 595, rhel 580) on a mixed fleet.")
    gpualign("lab", "down", show=False)
    gpualign("lab", "up", "--scenario", "operator-nvidiadriver")
    load_env()
    say("    With no flag, check reads the operator's own objects and names exactly the images it deploys:")
    gpualign("check", "-o", "wide", expect=1)
    run(kubectl, "patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p",
        '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":true}}}}')

    say("17. Left alone. The train pool moves to 595, but the image for gpu-c1's kernel (6.8.0-1015-aws) was never")
    say("    built. The operator's own upgrade walk cordons gpu-c1, evicts its work, restarts its driver... which")
    say("    cannot pull. The node has lost its GPUs, cordoned:")
    gpualign("lab", "push-image", "595-5.15.0-124-generic-ubuntu22.04", show=False)
    run(kubectl, "patch", "nvidiadriver", "train", "--type", "merge", "-p", '{"spec":{"version":"595"}}')

    def stuck() -> bool:
        rows = json.loads(gpualign("status", "-l", "pool=train", "-o", "json", show=False, echo=False).stdout)["nodes"]
        c1 = next(r for r in rows if r["name"] == "gpu-c1")
        return c1["state"] == "pod-restart-required" and "ImagePullBackOff" in (c1["blocker"] or "")

    wait("gpu-c1 to be drained into a failed pull", stuck)
    gpualign("status", "-l", "pool=train")
    gpualign("why", "gpu-c1")
    say("    Someone builds the image; the operator finishes gpu-c1:")
    gpualign("lab", "push-image", "595-6.8.0-1015-aws-ubuntu22.04")
    wait("gpu-c1 upgraded", lambda: node_labels("gpu-c1").get(state) == "upgrade-done")

    say("18. With gpualign's gate. The rhel pool moves to 595; its image is missing too. `gpualign controller")
    say("    --gate-operator-upgrades` keeps the operator's own skip label on every node it drives, and lifts it only")
    say("    when a node's image is judged and its PDBs let it drain: the operator never cordons gpu-r1. And")
    say("    gpualign's own walk refuses to be a second walker:")
    ENV_CTL = dict(ENV, POD_NAME="demo")
    run(kubectl, "create", "namespace", "gpualign-system")
    log = open(STATE.parent / "demo-controller.log", "w")  # noqa: SIM115
    from gpualign.lab.processes import free_port

    port = free_port()
    ctl = subprocess.Popen([sys.executable, "-m", "gpualign", "controller", "--gate-operator-upgrades",
                            "--ledger-refresh", "2", "--listen", f"127.0.0.1:{port}", "--lease-namespace",
                            "gpualign-system"], env=ENV_CTL, stdout=log, stderr=subprocess.STDOUT)
    try:
        # the gate acts on the operator's objects the moment they change: it must be watching them first
        wait("the controller watching", lambda: _metric(port, "gpualign_leader") == 1.0
             and (_metric(port, "gpualign_gpu_nodes") or 0) > 0)
        run(kubectl, "patch", "nvidiadriver", "rhel", "--type", "merge", "-p", '{"spec":{"version":"595"}}')
        wait("gpu-r1 gated", lambda: "upgrade-gated" in " ".join(run(
            kubectl, "get", "node", "gpu-r1", "-o", "jsonpath={.metadata.annotations}", show=False,
            echo=False).stdout.split()))
        time.sleep(3)  # the operator's walk has had its chance
        run(kubectl, "get", "node", "gpu-r1", "-L", state, "-L", skip, "-L", driver)
        if "SchedulingDisabled" in run(kubectl, "get", "node", "gpu-r1", show=False, echo=False).stdout:
            raise StoryBroken("the operator cordoned gpu-r1 despite the gate")
        gpualign("why", "gpu-r1")
        gpualign("upgrade", "-l", "pool=rhel", "--to-branch", "595", "--ledger",
                 f"registry://{ENV['GPUALIGN_LAB_REGISTRY']}/nvidia/driver", "--yes", expect=1)
        say("    The image arrives: the gate lifts its label and the operator upgrades gpu-r1:")
        gpualign("lab", "push-image", "595-5.14.0-427.37.1.el9_4.x86_64-rhel9.4")
        wait("gpu-r1 upgraded", lambda: node_labels("gpu-r1").get(state) == "upgrade-done"
             and node_labels("gpu-r1").get(driver) == "595.91.07")
        run(kubectl, "get", "node", "gpu-r1", "-L", state, "-L", skip, "-L", driver)
        pdb_story(kubectl, state, skip, driver)
    finally:
        ctl.terminate()
        ctl.wait(timeout=20)
        log.close()


def pdb_story(kubectl: str, state: str, skip: str, driver: str) -> None:
    """Chapter 18, second half: the seed's half-state (a PDB refusing the drain of a cordoned node), prevented."""
    import json
    import tempfile

    say("    The seed's half-state: a training job on gpu-a1 whose PDB allows no disruption, and a service on gpu-a2")
    say("    whose PDB allows one. The train pool rolls back to 580. Left alone, the operator would cordon gpu-a1")
    say("    and leave it stuck in pod deletion. The gate lets gpu-a2 (and gpu-c1) in, and holds gpu-a1, uncordoned:")
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}]
    for name, node, budget in (("trainer", "gpu-a1", {"minAvailable": 1}), ("server", "gpu-a2",
                                                                             {"maxUnavailable": 1})):
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml"},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                         "metadata": {"labels": {"app": name}},
                         "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{
                             "name": "t", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
        docs.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": f"{name}-pdb", "namespace": "ml"},
                     "spec": {**budget, "selector": {"matchLabels": {"app": name}}}})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": docs}, f)
    run(kubectl, "apply", "-f", f.name, show=False)
    wait("the PDBs counting their pods", lambda: json.loads(run(
        kubectl, "get", "pdb", "-n", "ml", "-o", "json", show=False, echo=False).stdout)["items"] and all(
        (p.get("status") or {}).get("currentHealthy") == 1 for p in json.loads(run(
            kubectl, "get", "pdb", "-n", "ml", "-o", "json", show=False, echo=False).stdout)["items"]))
    run(kubectl, "patch", "nvidiadriver", "train", "--type", "merge", "-p", '{"spec":{"version":"580"}}')
    wait("gpu-a2 walked back to 580", lambda: node_labels("gpu-a2").get(state) == "upgrade-done"
         and node_labels("gpu-a2").get(driver) == "580.173.02", timeout=120)
    run(kubectl, "get", "node", "gpu-a1", "gpu-a2", "-L", state, "-L", skip, "-L", driver)
    if "SchedulingDisabled" in run(kubectl, "get", "node", "gpu-a1", show=False, echo=False).stdout:
        raise StoryBroken("the operator cordoned gpu-a1 despite its PDB and the gate")
    gpualign("why", "gpu-a1")
    say("    The job's owner allows one disruption: the gate lets gpu-a1 in, and the operator walks it:")
    run(kubectl, "-n", "ml", "patch", "pdb", "trainer-pdb", "--type", "merge", "-p", '{"spec":{"minAvailable":0}}')
    wait("gpu-a1 walked back to 580", lambda: node_labels("gpu-a1").get(state) == "upgrade-done"
         and node_labels("gpu-a1").get(driver) == "580.173.02", timeout=120)
    run(kubectl, "get", "node", "gpu-a1", "-L", state, "-L", skip, "-L", driver)


def controller_pod_story() -> None:
    import json
    import tempfile

    kubectl = str(Path(ENV["GPUALIGN_LAB_BIN"]) / "kubectl")
    node = json.loads(gpualign("lab", "status", "-o", "json", show=False, echo=False).stdout).get("realNode")
    say("19. Beside the GPU Operator, chapters 17 and 18 ran the controller as a process. A user runs it as the Helm")
    say("    chart's pod, on the lab's real node, lab-system (kubelet and containerd), where pods really run:")
    if not node:
        say("    (this machine gave the lab no real node: see `gpualign lab up --help`; chapter skipped)")
        return
    run(kubectl, "get", "node", "lab-system", "-o", "wide")
    gpualign("lab", "push-self")
    values = Path(tempfile.mkdtemp(prefix="gpualign-demo-")) / "values.yaml"
    values.write_text(gpualign("lab", "chart-values", show=False).stdout)
    from gpualign.lab import versions

    helm = str(versions.helm_binary(Path(ENV["GPUALIGN_LAB_BIN"])))
    run(helm, "install", "ga", str(ROOT / "charts" / "gpualign"), "-n", "gpualign-system", "--create-namespace",
        "-f", str(values), "--wait", "--timeout", "120s", show=False)
    run(kubectl, "get", "pods", "-n", "gpualign-system", "-o", "wide")
    say("    It took the controller's Lease, and what it found is in its own log, written in the pod:")
    pod = run(kubectl, "get", "pods", "-n", "gpualign-system", "-l", "app=gpualign-controller", "-o",
              "jsonpath={.items[0].metadata.name}", show=False, echo=False).stdout
    wait("the pod holding the Lease", lambda: run(
        kubectl, "get", "lease", "-n", "gpualign-system", "gpualign-controller", "-o",
        "jsonpath={.spec.holderIdentity}", show=False, echo=False, expect=None).stdout == pod)
    run(kubectl, "get", "lease", "-n", "gpualign-system", "gpualign-controller")
    wait("the controller's first pass", lambda: "missing" in run(
        kubectl, "logs", "-n", "gpualign-system", pod, show=False, echo=False, expect=None).stdout)
    log = run(kubectl, "logs", "-n", "gpualign-system", pod, show=False).stdout.splitlines()
    print("\n".join(line for line in log if "leader" in line or "missing" in line), flush=True)
    run(helm, "uninstall", "ga", "-n", "gpualign-system", "--wait", show=False)
    values.unlink()
    values.parent.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="leave the demo lab running at the end")
    args = ap.parse_args()
    ENV["GPUALIGN_LAB_DIR"] = str(STATE)
    say("0. Start the lab: etcd, kube-apiserver, controller-manager, scheduler, kwok, a registry, a driver simulator,")
    say("   and one real node.")
    gpualign("lab", "down", show=False)
    gpualign("lab", "up")
    load_env()
    from_state = [ln for ln in gpualign("lab", "env", show=False).stdout.splitlines() if "PATH=" in ln]
    ENV["GPUALIGN_LAB_BIN"] = from_state[0].split("=", 1)[1].split(":", 1)[0]
    try:
        story()
        ensure_story()
        operator_story()
        controller_pod_story()
    except StoryBroken as err:
        print(f"\ndemo: the story broke: {err}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            gpualign("lab", "down", show=False)
    say("The end. Every step above ran against real Kubernetes components.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
