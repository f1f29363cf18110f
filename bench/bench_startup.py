"""Benchmark: how long a gpualign command takes before (and including) its work, beside `python3 -c pass` and
`kubectl version --client`, timed by Debian's hyperfine in one run. Also the table's cost against JSON on a
2,000-node dump (the table must cost no more than 1.2x the JSON).

Targets (issue 14, this 2-core machine, idle): `gpualign --version` <= 0.10 s, `cuda affinity -o json` <= 0.20 s,
`check --nodes-file` on 10 nodes <= 0.30 s, table/JSON at 2,000 nodes <= 1.2.

    .venv/bin/python bench/bench_startup.py --runs 20
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpualign.lab.scenarios import NodeSpec  # noqa: E402
from gpualign.lab.seed import node_manifest  # noqa: E402

KERNELS = ["5.15.0-124-generic", "5.15.0-125-generic", "6.8.0-48-generic", "6.8.0-1015-aws", "6.8.0-1017-azure"]
TARGETS = {"gpualign --version": 0.10, "gpualign cuda affinity -o json": 0.20,
           "gpualign check, 10 nodes (table)": 0.30, "gpualign check, 10 nodes (json)": 0.30}


def write_dump(path: Path, count: int) -> None:
    items = [node_manifest(NodeSpec(f"ip-10-0-{i // 250}-{i % 250}.us-west-2.compute.internal",
                                    KERNELS[i % len(KERNELS)], "ubuntu", "22.04", driver="580.173.02"))
             for i in range(count)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def hyperfine(commands: dict[str, str], runs: int, work: Path) -> dict[str, dict[str, float]]:
    out = work / "hyperfine.json"
    cmd = ["hyperfine", "--style", "basic", "--warmup", "3", "--runs", str(runs), "-N", "-i",
           "--export-json", str(out)]
    for name, line in commands.items():
        cmd += ["-n", name, line]
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    rows = json.loads(out.read_text())["results"]
    return {r["command"]: {"median_s": r["median"], "mean_s": r["mean"], "min_s": r["min"], "max_s": r["max"]}
            for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--big", type=int, default=2000, help="nodes in the table-vs-JSON dump")
    ap.add_argument("--out", type=Path, default=Path("bench/results/startup.json"))
    args = ap.parse_args()
    if not shutil.which("hyperfine"):
        print("hyperfine is missing: apt-get install hyperfine", file=sys.stderr)
        return 2
    gpualign = str(Path(sys.executable).parent / "gpualign")
    kubectl = shutil.which("kubectl") or "kubectl"
    # gpualign runs from bytecode, as an installed copy does (pip compiles a wheel's modules as it installs them):
    # with PYTHONDONTWRITEBYTECODE set, a checkout would compile every module it imports from source on every run.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parent.parent / "src")],
                   check=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_dump(work / "nodes10.json", 10)
        write_dump(work / "nodes-big.json", args.big)
        (work / "ledger.txt").write_text("".join(f"580-{k}-ubuntu22.04\n" for k in KERNELS[:3]))
        check = f"{gpualign} check --nodes-file {work}/nodes10.json --ledger {work}/ledger.txt --driver-branch 580"
        big = f"{gpualign} check --nodes-file {work}/nodes-big.json --ledger {work}/ledger.txt --driver-branch 580"
        startup = hyperfine({
            "python3 -c pass": f"{sys.executable} -c pass",
            "kubectl version --client": f"{kubectl} version --client",
            "gpualign --version": f"{gpualign} --version",
            "gpualign --help": f"{gpualign} --help",
            "gpualign cuda affinity -o json": f"{gpualign} cuda affinity --cuda 12.4 -o json",
            "gpualign check, 10 nodes (table)": check,
            "gpualign check, 10 nodes (json)": check + " -o json",
        }, args.runs, work)
        render = hyperfine({
            f"check, {args.big} nodes -o json": big + " -o json",
            f"check, {args.big} nodes (table)": big,
            f"check, {args.big} nodes -o wide": big + " -o wide",
        }, max(5, args.runs // 4), work)
    json_s = render[f"check, {args.big} nodes -o json"]["median_s"]
    table_ratio = render[f"check, {args.big} nodes (table)"]["median_s"] / json_s
    wide_ratio = render[f"check, {args.big} nodes -o wide"]["median_s"] / json_s
    print(f"{'command':38} {'median':>8} {'min':>8} {'max':>8}  target")
    for name, r in {**startup, **render}.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:.2f} s {'met' if r['median_s'] <= target else 'MISSED'}"
        print(f"{name:38} {r['median_s']:8.3f} {r['min_s']:8.3f} {r['max_s']:8.3f}  {verdict}")
    print(f"table / json at {args.big} nodes: {table_ratio:.2f} (target <= 1.2: "
          f"{'met' if table_ratio <= 1.2 else 'MISSED'}); wide / json: {wide_ratio:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"startup": startup, "render": render, "table_over_json": table_ratio,
                                    "wide_over_json": wide_ratio, "targets": TARGETS}, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
