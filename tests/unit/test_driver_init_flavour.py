"""The image's own `nvidia-driver init` loads only the flavour of modules it holds: a pod that asks for the other
(the GPU Operator's KERNEL_MODULE_TYPE, or OPEN_KERNEL_MODULES_ENABLED from an older operator) is refused in one
line, before anything on the node is touched. Run in a mount namespace with its own /run, so the script's lock
file lands nowhere real; every case ends before a module would be unloaded or loaded (at the flavour check, or at
the kernel check that follows it, for a kernel this machine does not run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpualign.model import flavours

SCRIPT = Path(__file__).resolve().parents[2] / "src" / "gpualign" / "ensure" / "nvidia-driver.sh"
OTHER_KERNEL = "6.12.118+deb13-amd64"  # never the kernel running the tests: the kernel check stops a passing case

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")


def init(branch: str, held: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    assignments = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DRIVER_BRANCH": branch, "GPUALIGN_KERNEL": OTHER_KERNEL,
                   **({"GPUALIGN_KERNEL_MODULE_TYPE": held} if held else {}), **env}
    command = ["env", "-i", *(f"{k}={v}" for k, v in assignments.items()), "sh", str(SCRIPT), "init"]
    return subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-c",
                           'mount -t tmpfs none /run && exec "$@"', "sh", *command],
                          capture_output=True, text=True, timeout=30)


def refused_for_flavour(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode == 1 and "kernel modules; this pod asks for" in proc.stderr


@pytest.mark.parametrize(("branch", "held", "env", "wanted"), [
    ("550", "proprietary", {"KERNEL_MODULE_TYPE": "open"}, "open"),
    ("550", "open", {"KERNEL_MODULE_TYPE": "auto"}, "proprietary"),  # auto below 560: proprietary
    ("550", "open", {}, "proprietary"),  # no variable at all (an operator that sets none) is auto
    ("580", "proprietary", {"KERNEL_MODULE_TYPE": "auto"}, "open"),  # auto from 560: open
    ("535", "proprietary", {"OPEN_KERNEL_MODULES_ENABLED": "true"}, "open"),  # an older operator's variable
])
def test_a_pod_asking_for_the_other_flavour_is_refused_in_one_line(branch, held, env, wanted):
    proc = init(branch, held, **env)
    assert refused_for_flavour(proc), proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpualign:")]
    assert len(line) == 1 and f"holds NVIDIA's {held} kernel modules; this pod asks for {wanted}" in line[0]
    assert f"gpualign ensure --flavour {wanted}" in line[0]
    if "OPEN_KERNEL_MODULES_ENABLED" not in env:  # check decides as the image does (gpualign.model.flavours)
        assert flavours.resolve(env.get("KERNEL_MODULE_TYPE"), branch) == wanted
    # and the lab's driver simulator says, word for word, what the script says
    assert flavours.init_refusal(held, env, branch, OTHER_KERNEL) == line[0]


@pytest.mark.parametrize(("branch", "held", "env"), [
    ("550", "proprietary", {"KERNEL_MODULE_TYPE": "auto"}),
    ("550", "open", {"KERNEL_MODULE_TYPE": "open"}),
    ("580", "open", {}),
    ("535", None, {"KERNEL_MODULE_TYPE": "open"}),  # an image that names no flavour: nothing to compare
])
def test_the_flavour_the_image_holds_goes_on_to_the_kernel_check(branch, held, env):
    proc = init(branch, held, **env)
    assert not refused_for_flavour(proc), proc.stderr
    assert f"verified for kernel {OTHER_KERNEL}; this node runs" in proc.stderr
    assert flavours.init_refusal(held, env, branch, OTHER_KERNEL) is None


def test_an_unknown_module_type_is_named():
    proc = init("550", "proprietary", KERNEL_MODULE_TYPE="closed")
    assert proc.returncode == 1
    assert "invalid value for the KERNEL_MODULE_TYPE variable: closed" in proc.stderr
    assert flavours.init_refusal("proprietary", {"KERNEL_MODULE_TYPE": "closed"}, "550", OTHER_KERNEL) in proc.stderr
