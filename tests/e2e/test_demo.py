"""README's first command must stay true: the demo walks the whole story and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(2400)  # on a cold machine its Debian chapters compile NVIDIA's modules (a few CPU-minutes each)
def test_demo_tells_the_whole_story(tmp_path):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    env.pop("GPUALIGN_LAB_DIR", None)
    env.pop("GPUALIGN_LAB_REAL_NODE", None)  # as `make demo` runs: the lab gets the machine's real node
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], capture_output=True, text=True,
                          env=env, timeout=2300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    for needle in ("ImagePullBackOff", '"KERNEL_VERSION": "5.15.0-125-generic"', "FailedScheduling",
                   "Cannot evict pod as it would violate",
                   "waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions", "held before cordon",
                   "summary after", "7 upgrade-done",
                   "was cordoned before the upgrade: left cordoned",
                   "nvidiadriver/train", "walked by the GPU Operator's upgrade controller",
                   "is ImagePullBackOff: image", "gpualign's gate set it", "refusing to walk gpu-r1",
                   "gpualign's gate set it: waiting before cordon: PDB ml/trainer-pdb allows 0 disruptions",
                   "535-6.1.0-50-amd64-debian12: built → ", "symbol CRCs verified",
                   "deb-1   debian12   6.1.0-50-amd64   535      535-6.1.0-50-amd64-debian12   present   Running",
                   "wrong-image", "its modules would not load on 6.1.0-47-amd64", "CrashLoopBackOff",
                   "insmod: ERROR: could not insert module", "disagrees about version of symbol",
                   "shared modules: 5 pulled from", "and its driver pod was Ready",
                   "550-6.12.118_deb13-amd64-debian13   missing   build    deb-1",
                   "550-6.12.118_deb13-amd64-debian13: built → ",
                   "deb13-1   debian13   6.12.118_deb13-amd64   550      550-6.12.118_deb13-amd64-debian13   present   "
                   "Running",
                   "became the leader", "lab-system   Ready",
                   "nvidia-driver init in ", "refusing to load (the kernel would refuse them",
                   "The end."):
        assert needle in out, needle
    assert not (tmp_path / "gpualign" / "demo").exists()  # the demo lab was taken down
