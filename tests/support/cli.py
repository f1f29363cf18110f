"""gpualign run as a user runs it: the real entry point in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 120) -> CliResult:
    """Run the real `gpualign` entry point in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "gpualign", *args], capture_output=True, text=True,
                          env=full_env, input=input, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)
