"""Benchmark: the kernel load check (gpualign.judging.kernel_boot): Debian's own kernel booted in qemu (TCG) with a
busybox initramfs, the kernel's drm and a driver image's nvidia.ko loaded into it, to NVIDIA's "No NVIDIA GPU found".
The kernel's package is read and unpacked once (its first run, reported apart); each later run is the check as
ensure makes it before a push.

Target (issue 71, this 2-core machine, the kernel package cached): at most 20 s per amd64 image.

    .venv/bin/python bench/bench_kernel_load.py --kernel 6.1.0-50-amd64 --repeat 3 \
        --modules ~/.cache/gpualign/ensure/modules/535.309.01/6.1.0-50-amd64/proprietary/unsigned

The modules are what `gpualign ensure` compiled and cached (the build test leaves them there). With
--secure-boot-cert the kernel boots under UEFI Secure Boot (OVMF) and the modules must be signed by that key.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.judging.kernel_boot import boot_and_load, kernel_tree, kernels_cache  # noqa: E402

TARGET_SECONDS = 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", type=Path, required=True, help="a directory of an image's .ko files")
    ap.add_argument("--kernel", required=True, help="the kernel release to boot, e.g. 6.1.0-50-amd64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/results/kernel-load.json"))
    ap.add_argument("--secure-boot-cert", type=Path, action="append", default=[], metavar="CERT",
                    help="boot under UEFI Secure Boot trusting CERT for modules (the modules must be signed by it)")
    args = ap.parse_args()
    t0 = time.monotonic()
    kernel_tree(args.kernel, kernels_cache())
    package_seconds = time.monotonic() - t0
    runs = []
    for _ in range(args.repeat):
        started = time.monotonic()
        verdict = boot_and_load(args.modules, args.kernel, kernels_cache(),
                                trust=tuple(p.read_bytes() for p in args.secure_boot_cert))
        runs.append(time.monotonic() - started)
        print(f"{verdict.line()} (whole check {runs[-1]:.1f} s)", file=sys.stderr)
        if not verdict.ok:
            return 1
    result = {"kernel": args.kernel, "modules": str(args.modules), "accel": verdict.accel,
              "secure_boot": verdict.as_dict()["secure_boot"],
              "package_first_read_s": round(package_seconds, 1), "runs_s": [round(r, 1) for r in runs],
              "median_s": round(statistics.median(runs), 1), "target_s": TARGET_SECONDS,
              "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if result["median_s"] <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
