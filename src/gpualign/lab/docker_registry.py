"""Debian's docker-registry, as the lab runs it: where the binary is, its config, and one started on its own.

The lab's registry is the ledger of `lab up`. A registry of its own, on a free port beside the lab, is what the tests
mirror from (a stand-in for NVIDIA's) and what the ensure bench pushes into (an empty ledger per run): the same binary
and config, so a difference between them is never the cause of a result.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx2

from gpualign.base.errors import LabError
from gpualign.lab import processes
from gpualign.lab.processes import Proc

BINARY = "docker-registry"


def binary() -> str:
    """$GPUALIGN_REGISTRY_BIN, else docker-registry on PATH or in /usr/bin."""
    found = os.environ.get("GPUALIGN_REGISTRY_BIN") or shutil.which(BINARY) or (
        "/usr/bin/docker-registry" if os.access("/usr/bin/docker-registry", os.X_OK) else None)
    if not found or not os.access(found, os.X_OK):
        raise LabError("docker-registry not found: install Debian's package (apt-get install docker-registry)")
    return found


def config(data_dir: Path, address: str) -> str:
    """Quiet, filesystem storage under data_dir, deletes allowed (the lab removes images), serving on address."""
    return ("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {data_dir}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {address}\n")


def start(work_dir: Path, *, timeout: float = 30.0) -> Proc:
    """A registry of its own on a free 127.0.0.1 port, its data and log under work_dir, returned once it serves
    /v2/ (proc.address: host:port). Stop it with processes.stop."""
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _serve(work_dir, processes.free_port(), timeout)
    except processes.ExitedAtStart as exited:
        if not exited.port_taken:  # a port free when chosen, bound first by something started beside it
            raise
    return _serve(work_dir, processes.free_port(), timeout)


def _serve(work_dir: Path, port: int, timeout: float) -> Proc:
    address = f"127.0.0.1:{port}"
    conf = work_dir / "config.yml"
    conf.write_text(config(work_dir / "data", address))
    proc = processes.start("registry", [binary(), "serve", str(conf)], work_dir / "registry.log", address=address)
    try:
        with httpx2.Client(timeout=2.0) as probe:
            processes.wait_until(proc, lambda: probe.get(f"http://{address}/v2/").status_code == 200,
                                 timeout=timeout, what="serving", port=port)
    except BaseException:
        processes.stop(proc)
        raise
    return proc
