"""Benchmark: `gpualign ensure` for N Debian 12 kernels, against the naive path and the compile's floor, in one run.

On a private cache (GPUALIGN_CACHE: apt state, build roots, compiled modules, the image base, buildah's storage) and
a private registry on 127.0.0.1:
- cold: the cache empty: build roots from Debian's archive, the compiles, the images, the pushes;
- warm: the same cache, an empty ledger (a new registry, so every blob is uploaded): nothing compiled, the
  modules verified again, the images pushed; the median of 5 runs, each into its own new registry (the range is
  recorded);
- all-present: the same ledger again: nothing to do (median of 5);
- check: one `gpualign check --nodes-file` of N nodes on those kernels against that ledger (median of 5), the
  target for all-present;
- naive: NVIDIA's documented way for an unlisted kernel: one full image build per kernel, in sequence, with the same
  recipe (the Debian Containerfile `ensure --render` writes, `buildah bud` without a layer cache, on the same local
  bookworm base), then a push;
- floor: the CPU time of the cold run's compiles (the kernel's accounting of each compile, wait4) / the cores.
Targets: all-present <= one check; warm <= 1.2x its own push time (with --jobs > 1 the images are pushed side by
side, so the push phase is at least the longest push: the ratio is to that; the median run's); cold <= 1.3x the
floor. The image size is recorded: uncompressed (buildah) and as pushed (the manifest's layer sizes).
gpualign runs from bytecode, as an installed copy does, and each timed phase starts after a sync.

    .venv/bin/python bench/bench_ensure.py --kernels 6.1.0-47-amd64 6.1.0-50-amd64 --jobs 2

Needs root, buildah, mmdebstrap, skopeo and docker-registry (scripts/install-debs), and Debian's archive.
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

from gpualign.ensure import recipes
from gpualign.lab import docker_registry, processes  # noqa: E402
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient  # noqa: E402
from gpualign.model import driver_tag  # noqa: E402
from gpualign.model.kernels import Kernel  # noqa: E402

GPUALIGN = [sys.executable, "-m", "gpualign"]


def timed(cmd: list[str], env: dict[str, str], what: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds of it and its descendants, the result); raises naming `what` on failure."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    usage = _children_cpu()
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}): {err.strip()[-600:]}")
    return wall, usage, result


_last_children = 0.0


def _children_cpu() -> float:
    """CPU seconds used by children finished since the last call (this script runs one at a time)."""
    global _last_children
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    now = ru.ru_utime + ru.ru_stime
    delta, _last_children = now - _last_children, now
    return delta


def nodes_file(path: Path, kernels: list[str], version: str = "12") -> None:
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"deb-{i}", "labels": {
        "feature.node.kubernetes.io/kernel-version.full": k, "feature.node.kubernetes.io/system-os_release.ID":
        "debian", "feature.node.kubernetes.io/system-os_release.VERSION_ID": version,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": version, "nvidia.com/gpu.present": "true",
        "kubernetes.io/arch": Kernel.of(k).arch_or_amd64}}} for i, k in enumerate(kernels)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def median_wall(cmd: list[str], env: dict[str, str], what: str, runs: int = 5) -> float:
    return statistics.median(timed(cmd, env, what)[0] for _ in range(runs))


def image_sizes(reg: str, repo: str, tag: str) -> int:
    client = RegistryClient(RegistryRef(host=reg, repo=repo, scheme="http"), timeout=10.0)
    try:
        manifest = client.manifest(tag) or {}
        if "manifests" in manifest:  # an arm64 image's index: its one platform's image
            manifest = client.manifest(manifest["manifests"][0]["digest"]) or {}
    finally:
        client.close()
    return sum(int(layer.get("size", 0)) for layer in manifest.get("layers") or []) + \
        int((manifest.get("config") or {}).get("size", 0))


def buildah(env: dict[str, str], cache: Path, *args: str) -> list[str]:
    s = cache / "containers"
    return ["buildah", "--root", str(s / "storage"), "--runroot", str(s / "run"), "--storage-driver", "vfs", *args]


def make_naive_base(env: dict[str, str], cache: Path, work: Path) -> str:
    """debian:bookworm for the naive builds (not timed): a minbase with apt, as NVIDIA's Containerfiles start from
    (gpualign's own image base has no apt: its modules are compiled elsewhere)."""
    name = "localhost/bench-naive-base:bookworm"
    tar = work / "naive-base.tar"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", "bookworm", str(tar)], check=True)
    ctr = subprocess.run(buildah(env, cache, "from", "scratch"), check=True, capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(buildah(env, cache, "add", "--quiet", ctr, str(tar), "/"), check=True)
    subprocess.run(buildah(env, cache, "commit", "--quiet", ctr, name), check=True, capture_output=True)
    subprocess.run(buildah(env, cache, "rm", ctr), check=True, capture_output=True)
    return name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="+", default=["6.1.0-47-amd64", "6.1.0-50-amd64"])
    ap.add_argument("--os", default="debian12", help="the OS tag: debian12 (bookworm) or debian13 (trixie)")
    ap.add_argument("--branch", default="535", help="the driver branch (Debian 13 carries 550)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", type=Path, help="the private cache (default: a new temporary directory, removed)")
    ap.add_argument("--warm-runs", type=int, default=5, help="warm runs, each into a new empty registry (the median "
                                                               "is the figure; the range is recorded)")
    ap.add_argument("--no-naive", action="store_true", help="skip the naive builds")
    ap.add_argument("--out", type=Path, default=Path("bench/results/ensure.json"))
    args = ap.parse_args()
    tags = [f"{args.branch}-{k}-{args.os}" for k in args.kernels]
    work = Path(tempfile.mkdtemp(prefix="gpualign-bench-ensure-", dir="/var/tmp"))
    cache = args.cache or work / "cache"
    env = {**os.environ, "GPUALIGN_CACHE": str(cache)}
    # gpualign runs from bytecode, as an installed copy does (pip compiles a wheel's modules when it installs them);
    # with PYTHONDONTWRITEBYTECODE set, as in this machine's shell, an editable checkout would otherwise compile its
    # modules from source on every run (~12 ms of a warm run)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parent.parent / "src")],
                   check=True)
    reg_proc = docker_registry.start(work / "cold-registry")
    reg = reg_proc.address
    warm_procs: list[processes.Proc] = []
    row: dict[str, object] = {"kernels": args.kernels, "os": args.os, "branch": args.branch, "jobs": args.jobs,
                              "cores": os.cpu_count()}
    try:
        _children_cpu()
        os.sync()  # what was written before is not charged to the cold run
        print(f"cold: ensure {len(tags)} images from an empty cache ({cache}) ...", flush=True)
        wall, cpu, res = timed([*GPUALIGN, "ensure", *tags, "--ledger", f"registry://{reg}/cold/driver",
                                "--jobs", str(args.jobs), "-o", "json"], env, "cold ensure")
        images = json.loads(res.stdout)["images"]
        compile_cpu = sum(float(i["seconds"].get("compile_cpu", 0)) for i in images)
        floor = compile_cpu / (os.cpu_count() or 1)
        row["cold"] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "compile_cpu_s": round(compile_cpu, 1),
                       "floor_s": round(floor, 1), "over_floor": round(wall / floor, 2),
                       "steps": {i["tag"]: i["seconds"] for i in images}}
        print(f"cold: {wall:.1f}s wall, {cpu:.1f} CPU-s; compiles {compile_cpu:.1f} CPU-s -> floor {floor:.1f}s; "
              f"{wall / floor:.2f}x floor", flush=True)

        runs = []
        for n in range(args.warm_runs):  # each into a new, empty registry: every blob is uploaded again
            warm_procs.append(docker_registry.start(work / f"warm-registry-{n}"))
            warm_reg = warm_procs[-1].address
            os.sync()  # nor the cold run's writes (or the last warm run's) to this one
            wall, cpu, res = timed([*GPUALIGN, "ensure", *tags, "--ledger", f"registry://{warm_reg}/warm/driver",
                                    "--jobs", str(args.jobs), "-o", "json"], env, "warm ensure")
            images = json.loads(res.stdout)["images"]
            pushes = [float(i["seconds"].get("push", 0)) for i in images]
            # with --jobs > 1 the images are pushed side by side: the push phase lasts at least the longest one
            push = max(pushes) if args.jobs > 1 else sum(pushes)
            runs.append({"wall_s": round(wall, 2), "push_s": round(push, 2), "push_sum_s": round(sum(pushes), 2),
                         "over_push": round(wall / push, 3), "steps": {i["tag"]: i["seconds"] for i in images}})
            print(f"warm {n + 1}: {wall:.2f}s wall; pushes {', '.join(f'{p:.2f}s' for p in pushes)} "
                  f"({'side by side' if args.jobs > 1 else 'one after another'}); {wall / push:.3f}x push", flush=True)
            if n + 1 < args.warm_runs:  # the last registry stays: all-present and check read it
                processes.stop(warm_procs.pop())
        middle = sorted(runs, key=lambda r: float(r["over_push"]))[len(runs) // 2]
        row["warm"] = {**middle, "runs": len(runs), "over_push_range": [min(float(r["over_push"]) for r in runs),
                                                                        max(float(r["over_push"]) for r in runs)],
                       "over_push_each": [r["over_push"] for r in runs]}
        print(f"warm: median {middle['over_push']:.3f}x push (range {row['warm']['over_push_range'][0]:.3f}-"
              f"{row['warm']['over_push_range'][1]:.3f}x over {len(runs)} runs)", flush=True)

        present = median_wall([*GPUALIGN, "ensure", *tags, "--ledger", f"registry://{warm_reg}/warm/driver"], env,
                              "all-present ensure")
        nodes_file(work / "nodes.json", args.kernels, args.os.removeprefix("debian"))
        check = median_wall([*GPUALIGN, "check", "--nodes-file", str(work / "nodes.json"), "--driver-branch",
                             args.branch,
                             "--ledger", f"registry://{warm_reg}/warm/driver"], env, "check")
        row["all_present"] = {"wall_s": round(present, 2), "check_wall_s": round(check, 2),
                              "over_check": round(present / check, 2)}
        print(f"all-present: {present:.2f}s; one check {check:.2f}s; {present / check:.2f}x check", flush=True)

        size = subprocess.run(buildah(env, cache, "images", "--format", "{{.Name}}:{{.Tag}} {{.Size}}"),
                              capture_output=True, text=True).stdout
        row["image"] = {"pushed_bytes": image_sizes(reg, "cold/driver", tags[0]),
                        "buildah_images": [line for line in size.splitlines() if "gpualign-driver" in line]}
        print(f"image: {row['image']}", flush=True)

        if not args.no_naive:
            naive_base = make_naive_base(env, cache, work)
            naive_total, naive_rows = 0.0, {}
            for tag in tags:
                spec = driver_tag.parse(tag)
                recipe = recipes.render(spec, "535")
                ctx = work / "naive" / tag
                ctx.mkdir(parents=True)
                for name, text in recipe.files.items():
                    (ctx / name).write_text(text)
                    (ctx / name).chmod(0o755)
                print(f"naive: buildah bud {tag} (a full build, no layer cache) ...", flush=True)
                bud_wall, bud_cpu, _ = timed(buildah(env, cache, "bud", "--quiet", "--layers=false", "--isolation",
                                                     "chroot", "--build-arg", f"BUILDER_BASE={naive_base}",
                                                     "--build-arg", f"FINAL_BASE={naive_base}", "-t",
                                                     f"localhost/naive:{tag}", str(ctx)), env, f"naive build {tag}")
                push_wall, _, _ = timed(buildah(env, cache, "push", "--quiet", "--tls-verify=false",
                                                f"localhost/naive:{tag}", f"docker://{reg}/naive/driver:{tag}"),
                                        env, f"naive push {tag}")
                naive_rows[tag] = {"build_s": round(bud_wall, 1), "build_cpu_s": round(bud_cpu, 1),
                                   "push_s": round(push_wall, 1)}
                naive_total += bud_wall + push_wall
                print(f"naive {tag}: build {bud_wall:.1f}s ({bud_cpu:.1f} CPU-s), push {push_wall:.1f}s", flush=True)
            row["naive"] = {"wall_s": round(naive_total, 1), "per_image": naive_rows,
                            "cold_over_naive": round(float(row["cold"]["wall_s"]) / naive_total, 2)}  # type: ignore[index]
            print(f"naive: {naive_total:.1f}s in all", flush=True)
    finally:
        for proc in [reg_proc, *warm_procs]:
            processes.stop(proc)
        if args.cache is None:
            subprocess.run(buildah(env, cache, "rm", "--all"), capture_output=True)
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(row, indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(row, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
