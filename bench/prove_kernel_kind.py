"""Compile NVIDIA's modules for one kernel for real, whatever gpualign decides of it, and print what came of it:
the proof behind a kernel kind's decision (gpualign.model.makers), built or refused, with the compile's first real
error line as ensure would report it.

    .venv/bin/python bench/prove_kernel_kind.py 6.1.0-57-rt-amd64 [--flavour proprietary] [--suite bookworm]

Needs root (the build root's chroot), Debian's archive and a few CPU-minutes for a kernel that compiles. The
modules of a kernel that compiles are cached as a build's are (~/.cache/gpualign/ensure/modules).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpualign.archive.apt import Archive
from gpualign.base.errors import GpualignError
from gpualign.ensure import debian


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", help="the kernel release, as uname -r names it")
    parser.add_argument("--flavour", default="proprietary", choices=("proprietary", "open"))
    args = parser.parse_args()
    archive = Archive.for_kernel(args.kernel)
    t0 = time.monotonic()
    try:
        built = debian.compile_modules(archive, args.kernel, args.flavour,
                                       progress=lambda m: print(f"... {m}", file=sys.stderr))
        result = {"kernel": args.kernel, "flavour": args.flavour, "outcome": "built",
                  "modules": [p.name for p in built.modules], "driver_version": built.driver_version}
    except GpualignError as err:
        result = {"kernel": args.kernel, "flavour": args.flavour, "outcome": "refused",
                  "error": f"{type(err).__name__}: {err.message}", "retryable": bool(err.retryable)}
    result["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
