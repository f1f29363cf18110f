"""Benchmark: the cost of one read of Debian's archive, as `plan --kernel next` and the controller make it (each
Debian pool's next kernel): per release and architecture, cold (an empty cache: each suite's InRelease verified,
each Packages index fetched by its hash and filtered while it is decompressed) and warm (the next poll: each
InRelease asked with If-Modified-Since, the filtered stanzas read from the cache). Requests, bytes on the wire, wall
and CPU seconds, and the peak resident memory of a process that does only that, each case in a process of its own.

It reads the archive gpualign is pointed at ($GPUALIGN_DEBIAN_MIRROR, else deb.debian.org), as ensure's builds do.

    .venv/bin/python bench/bench_archive_poll.py --releases bookworm trixie --archs amd64 arm64 --warm 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ONE = """
import json, resource, sys, time
from pathlib import Path
from gpualign.archive.indexes import ArchiveIndex
from gpualign.model import next_kernels
suite, arch, cache = sys.argv[1], sys.argv[2], Path(sys.argv[3])
index = ArchiveIndex(cache=cache)
wall, cpu = time.perf_counter(), time.process_time()
texts = {s: index.kernel_images(s, arch) for s in (suite, f"{suite}-updates", f"{suite}-security")}
lines = next_kernels.by_line(next_kernels.candidates(texts).values())
print(json.dumps({"requests": index.fetched.requests, "bytes": index.fetched.bytes,
                  "not_modified": index.fetched.not_modified, "wall_s": round(time.perf_counter() - wall, 3),
                  "cpu_s": round(time.process_time() - cpu, 3),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "lines": sorted(f"{'-'.join(p for p in line if p)}: {a.release}" for line, a in lines.items())}))
"""


def case(release: str, arch: str, cache: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", ONE, release, arch, str(cache)], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bench_archive_poll: {release}/{arch}: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", nargs="+", default=["bookworm", "trixie"])
    ap.add_argument("--archs", nargs="+", default=["amd64", "arm64"])
    ap.add_argument("--warm", type=int, default=3, help="warm polls after the cold one")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "archive-poll.json")
    args = ap.parse_args()
    results = []
    for release in args.releases:
        for arch in args.archs:
            with tempfile.TemporaryDirectory(prefix="gpualign-poll-") as tmp:
                cold = case(release, arch, Path(tmp))
                warm = [case(release, arch, Path(tmp)) for _ in range(args.warm)]
            row = {"release": release, "arch": arch, "cold": cold, "warm": warm}
            results.append(row)
            w = sorted(warm, key=lambda r: r["wall_s"])[len(warm) // 2] if warm else {}
            print(f"{release}/{arch}: cold {cold['requests']} requests, {cold['bytes'] / 1e6:.1f} MB, "
                  f"{cold['wall_s']:.2f} s ({cold['cpu_s']:.2f} CPU-s), peak {cold['peak_rss_mib']} MiB; "
                  f"warm {w.get('requests')} requests, {w.get('bytes', 0)} bytes, {w.get('wall_s')} s "
                  f"({w.get('cpu_s')} CPU-s), peak {w.get('peak_rss_mib')} MiB; next: {'; '.join(cold['lines'])}",
                  file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
