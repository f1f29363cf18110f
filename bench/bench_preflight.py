"""Benchmark: what the walk's default module check costs per image, in the preflight of `gpualign upgrade
--dry-run`. One lab, one Debian 12 node on 6.1.0-50-amd64 moving to branch 535, whose image (the real NVIDIA modules,
from the ensure cache; `make test` leaves them there) is in the lab registry. Timed, median of --repeat runs each:
- labels only (`--no-verify-modules`): the floor, one config request per image;
- modules, cold: the image's module layer pulled (about 48 MB) and checked, its cache emptied before each run;
- modules, warm: the module layer cached by digest, only the checks.
The per-image cost is (cold - labels) and (warm - labels).

    .venv/bin/python bench/bench_preflight.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.lab import cluster  # noqa: E402
from gpualign.loaders.archive_reading import ensure_root  # noqa: E402

GPUALIGN = [sys.executable, "-m", "gpualign"]
# Benchmark labs have no real node unless one measures it (bench_real_node.py): it is one per machine.
os.environ.setdefault("GPUALIGN_LAB_REAL_NODE", "false")
KERNEL = "6.1.0-50-amd64"
TAG = f"535-{KERNEL}-debian12"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUALIGN, *args], env=env, capture_output=True, text=True, timeout=600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench/results/preflight.json"))
    args = ap.parse_args()
    modules = sorted(Path.home().glob(f".cache/gpualign/ensure/modules/*/{KERNEL}/proprietary/unsigned"))
    if not modules:
        print(f"no cached modules for {KERNEL}: run `make test` (or `gpualign ensure {TAG} …`) first", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpualign-bench-preflight-"))
    env = dict(os.environ, GPUALIGN_LAB_DIR=str(work / "lab"))
    try:
        subprocess.run([*GPUALIGN, "lab", "up", "--scenario", "empty"], env=env, check=True)
        state = cluster.LabState.load(work / "lab")
        assert state is not None
        env["KUBECONFIG"] = str(state.kubeconfig)
        ledger = f"registry://{state.registry}/nvidia/driver"
        for step in (("ensure", TAG, "--ledger", ledger, "--modules-from", str(modules[-1])),
                     ("lab", "push-image", f"580-{KERNEL}-debian12"),
                     ("lab", "add-node", "deb-1", "--kernel", KERNEL, "--os", "debian12", "--branch", "580",
                      "--driver", "580.95.05")):
            res = run(env, *step)
            assert res.returncode == 0, res.stderr
        walk = ("upgrade", "-l", "kubernetes.io/hostname=deb-1", "--to-branch", "535", "--ledger", ledger, "--dry-run")
        images = ensure_root() / "images"

        def timed(*extra: str, cold: bool = False) -> float:
            if cold:
                shutil.rmtree(images, ignore_errors=True)
            t0 = time.perf_counter()
            res = run(env, *walk, *extra)
            took = time.perf_counter() - t0
            assert res.returncode == 0 and "image present" in res.stdout, res.stdout + res.stderr
            return took

        timed()  # warm the interpreter's files and the Module.symvers cache
        results = {
            "labels": [timed("--no-verify-modules") for _ in range(args.repeat)],
            "modules_cold": [timed(cold=True) for _ in range(args.repeat)],
            "modules_warm": [timed() for _ in range(args.repeat)],
        }
    finally:
        subprocess.run([*GPUALIGN, "lab", "down"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: round(statistics.median(v), 3) for k, v in results.items()}
    out = {"tag": TAG, "repeat": args.repeat, "median_seconds": medians, "runs": results,
           "per_image_seconds": {"cold": round(medians["modules_cold"] - medians["labels"], 3),
                                 "warm": round(medians["modules_warm"] - medians["labels"], 3)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["median_seconds"]), "per image:", json.dumps(out["per_image_seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
