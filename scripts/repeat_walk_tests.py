#!/usr/bin/env python3
"""Run the upgrade walk's safety tests again and again, to show a failure is gone rather than hidden.

Each round runs the SIGKILL run (with a fresh random GPUALIGN_KILL_SEED) and the PDB-admission tests, one pytest
process per test, each on its own lab. At the end it prints, per test, how many rounds passed and failed, and the
seeds and log folders of the failures. Not part of CI: a round takes several minutes.

    .venv/bin/python scripts/repeat_walk_tests.py --rounds 20
    .venv/bin/python scripts/repeat_walk_tests.py --rounds 5 --only killrun
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = {
    "killrun": "tests/integration/test_upgrade_killrun.py",
    "admission": "tests/integration/test_upgrade_pdb_admission.py",
}


@dataclass
class Tally:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def one_run(name: str, path: str, seed: int, logs: Path) -> tuple[bool, float]:
    out = logs / f"{name}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GPUALIGN_KILL_SEED": str(seed), "GPUALIGN_KEEP_LOGS": str(out / "lab-logs")}
    start = time.monotonic()
    with (out / "pytest.log").open("w") as log:
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    took = time.monotonic() - start
    if code == 0:
        subprocess.call(["rm", "-rf", str(out)])
    return code == 0, took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="how many times to run each test file")
    parser.add_argument("--only", choices=sorted(TESTS), action="append", help="run only this file (repeatable)")
    parser.add_argument("--logs", type=Path, default=ROOT / "test-artifacts" / "repeat-walk",
                        help="where the pytest output and lab logs of failed runs are kept")
    args = parser.parse_args(argv)
    chosen = {k: v for k, v in TESTS.items() if not args.only or k in args.only}
    tallies = {name: Tally() for name in chosen}
    rng = random.SystemRandom()
    for i in range(1, args.rounds + 1):
        for name, path in chosen.items():
            seed = rng.randrange(1, 2**31)
            ok, took = one_run(name, path, seed, args.logs)
            t = tallies[name]
            t.seconds.append(took)
            if ok:
                t.passed += 1
            else:
                t.failed.append(f"seed {seed}: {args.logs / f'{name}-{seed}'}")
            print(f"round {i}/{args.rounds} {name}: {'pass' if ok else 'FAIL'} (seed {seed}, {took:.0f} s)",
                  flush=True)
    print()
    for name, t in tallies.items():
        mean = sum(t.seconds) / len(t.seconds) if t.seconds else 0.0
        print(f"{name}: {t.passed} passed, {len(t.failed)} failed of {args.rounds} (mean {mean:.0f} s a run)")
        for failure in t.failed:
            print(f"  failed: {failure}")
    return 1 if any(t.failed for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
