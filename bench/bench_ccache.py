"""Benchmark: how much of a second kernel's compile is the first one's work again, with a compiler cache.

Debian's security updates move a kernel one ABI step (6.12.117+deb12 → 6.12.118+deb12); most of its headers, and most
of what NVIDIA's conftest and kbuild compile, do not change. This measures it, for real, in a private cache:

1. one build root with both kernels' headers and NVIDIA's module source (gpualign.ensure.buildroot), and Debian's
   ccache unpacked into it;
2. each kernel's headers copied to the same version-free paths (/build/k/common, /build/k/arch: its Makefile's
   include rewritten), and NVIDIA's source unpacked at the same path, so that line markers and `__FILE__` are the
   same for both; kbuild runs ccache as Debian's headers allow (`DEBIAN_KERNEL_USE_CCACHE=1`);
3. the first kernel compiled with an empty cache, then the second with the cache the first filled, then the second
   again with the cache off (its baseline), each timed (wall, and CPU from the kernel's accounting);
4. the second kernel's modules from the warm cache verified against its own Module.symvers (gpualign's verifier),
   and compared byte for byte with the baseline's.

    .venv/bin/python bench/bench_ccache.py --kernels 6.12.117+deb12-amd64 6.12.118+deb12-amd64

Writes bench/results/ccache.json. Needs root (chroot), mmdebstrap and Debian's archive.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

ROOT = Path(__file__).resolve().parent.parent
SLOPPY = "file_macro,time_macros,include_file_mtime,include_file_ctime,pch_defines"


def sh(rootfs: Path, script: str, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run a script in the root under chroot; (wall s, CPU s of it and its children, its output's tail)."""
    t0 = time.monotonic()
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/build"}
    proc = subprocess.Popen(["chroot", str(rootfs), "/bin/sh", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**base, **(env or {})})
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_ccache: step failed:\n{out[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, out


def install_ccache(archive, rootfs: Path, tmp: Path) -> str:  # type: ignore[no-untyped-def]
    debs = tmp / "ccache-debs"
    debs.mkdir()
    os.chmod(debs, 0o777)
    res = archive.download(["ccache", "libhiredis0.14"], debs)
    if res.returncode != 0:
        raise SystemExit(f"bench_ccache: downloading ccache failed: {res.stderr[-300:]}")
    for deb in debs.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
    return subprocess.run(["dpkg-deb", "-f", str(next(debs.glob("ccache_*.deb"))), "Version"], capture_output=True,
                          text=True, check=True).stdout.strip()


def place(rootfs: Path, kernel: str) -> str:
    """The kernel's headers at /build/k, NVIDIA's source at /build/nv, fresh; the script that does it."""
    return (f"set -e; rm -rf /build/k /build/nv; mkdir -p /build/k /build/nv; "
            f"cp -a /usr/src/linux-headers-{kernel.rsplit('-', 1)[0]}-common /build/k/common; "
            f"cp -a /usr/src/linux-headers-{kernel} /build/k/arch; "
            f"sed -i 's#^include .*/Makefile#include /build/k/common/Makefile#' /build/k/arch/Makefile; "
            # kbuild's scripts and tools, linked relatively from /usr/src: linked from /build/k to the same place
            f"for d in common arch; do for l in scripts tools; do [ -L /build/k/$d/$l ] || continue; "
            f"ln -sfn \"$(cd /usr/src/linux-headers-{kernel} && readlink -f $l)\" /build/k/$d/$l; done; done; "
            f"cd /build/nv; tar -xf /usr/src/nvidia-kernel.tar.xz")


def compile_script(jobs: int) -> str:
    return (f"set -e; cd /build/nv/modules/nvidia-kernel; make -j{jobs} modules SYSSRC=/build/k/common "
            "SYSOUT=/build/k/arch >/build/make.log 2>&1 || { tail -20 /build/make.log; exit 1; }; "
            "mkdir -p /build/out; rm -f /build/out/*; for ko in $(find . -name '*.ko'); do "
            "strip --strip-debug -o /build/out/$(basename $ko) $ko; done")


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.ko"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs=2, default=["6.12.117+deb12-amd64", "6.12.118+deb12-amd64"],
                    metavar=("FIRST", "SECOND"), help="two kernels one ABI step apart, as the kubelet reports them")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ccache.json")
    args = ap.parse_args()
    first, second = args.kernels
    with tempfile.TemporaryDirectory(prefix="gpualign-bench-ccache-", dir="/var/tmp") as tmp:
        os.environ["GPUALIGN_CACHE"] = str(Path(tmp) / "cache")
        from gpualign.archive.apt import Archive
        from gpualign.ensure import buildroot
        from gpualign.judging import kmod, symvers
        from gpualign.judging.verify import verify

        archive = Archive.for_kernel(second)
        with buildroot.held(archive, first, "proprietary", together=(second,),
                            progress=lambda m: print(m, file=sys.stderr, flush=True)) as root:
            rootfs = root.rootfs
            version = install_ccache(archive, rootfs, Path(tmp))
            env = {"CCACHE_DIR": "/build/ccache", "CCACHE_NOHASHDIR": "1", "CCACHE_SLOPPINESS": SLOPPY,
                   "CCACHE_MAXSIZE": "5G", "DEBIAN_KERNEL_USE_CCACHE": "1"}
            runs: dict[str, dict[str, object]] = {}
            for name, kernel, extra in (("first, cache empty", first, {}),
                                        ("second, cache warm", second, {}),
                                        ("second, cache off", second, {"CCACHE_DISABLE": "1"})):
                sh(rootfs, place(rootfs, kernel))
                if extra:
                    shutil.copytree(rootfs / "build" / "out", Path(tmp) / "warm-out", dirs_exist_ok=True)
                sh(rootfs, "ccache -z >/dev/null", env)
                wall, cpu, _ = sh(rootfs, compile_script(args.jobs), {**env, **extra})
                stats = sh(rootfs, "ccache --print-stats", env)[2]
                counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
                hits = int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0))
                misses = int(counts.get("cache_miss", 0))
                runs[name] = {"kernel": kernel, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                              "hits": hits, "misses": misses}
                print(f"{name} ({kernel}): {wall:.1f}s wall, {cpu:.1f} CPU-s; ccache {hits} hits, {misses} misses",
                      file=sys.stderr, flush=True)
            size = sh(rootfs, "du -sm /build/ccache | cut -f1")[2].strip()
            warm = Path(tmp) / "warm-out"
            table = symvers.parse(archive.symvers(second).read_text(), f"Module.symvers of {second}")
            modules = [kmod.read_file(p) for p in sorted(warm.glob("*.ko"))]
            checked = verify(modules, second, table, modules[0].field("version") or "")
            same = digests(warm) == digests(rootfs / "build" / "out")
    baseline, cached = runs["second, cache off"], runs["second, cache warm"]
    result = {"kernels": args.kernels, "jobs": args.jobs, "cores": os.cpu_count(), "ccache": version,
              "sloppiness": SLOPPY, "runs": runs, "cache_mb": int(size) if size.isdigit() else size,
              "second_cpu_saved": round(1 - float(cached["cpu_s"]) / float(baseline["cpu_s"]), 3),  # type: ignore
              "second_wall_saved": round(1 - float(cached["wall_s"]) / float(baseline["wall_s"]), 3),  # type: ignore
              "verified": {"ok": checked.ok, "symbols": checked.symbols_checked,
                           "first_problem": checked.first_problem()},
              "same_bytes_as_without_cache": same}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
