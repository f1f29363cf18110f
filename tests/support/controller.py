"""Running `gpualign controller` as a real process against a lab, and reading what it said (Events, annotations,
metrics)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from gpualign.lab.processes import free_port, listens_on
from gpualign.lab.scenarios import NodeSpec
from gpualign.lab.seed import add_node
from tests.support.waits import wait_for


class Controller:
    def __init__(self, lab, *extra: str, kubeconfig: Path | None = None, identity: str = "ctl",
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = open(lab.state_dir.parent / f"controller-{identity}-{self.port}.log", "w")  # noqa: SIM115
        env = {**os.environ, **lab.env, "POD_NAME": identity, **(env or {})}
        if kubeconfig:
            env["KUBECONFIG"] = str(kubeconfig)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpualign", "controller", "--ledger", f"registry://{lab.registry}/nvidia/driver",
             "--driver-branch", "580", "--listen", f"127.0.0.1:{self.port}", "--lease-namespace",
             "gpualign-system", *extra], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._synced, timeout=30, what="controller synced")

    def _synced(self) -> float | None:
        """Its first sync's gauge, read from this very process: another test's controller may hold the same port
        (it was free when chosen), and then this one exits at start while the other answers."""
        if self.proc.poll() is not None:
            self.log.flush()
            tail = Path(self.log.name).read_text()[-2000:]
            raise AssertionError(f"the controller exited at start ({self.proc.returncode}):\n{tail}")
        return listens_on(self.proc.pid, self.port) and self.metric("gpualign_gpu_nodes") or None

    def get(self, path: str) -> str:
        try:
            return httpx2.get(f"http://127.0.0.1:{self.port}{path}", timeout=2).text
        except httpx2.HTTPError:
            return ""

    def metric(self, name: str, labels: str = "") -> float | None:
        label_part = r"\{" + labels + r"\}" if labels else r"(\{[^}]*\})?"
        pattern = r"(?m)^" + re.escape(name) + label_part + r" ([0-9.e+-]+)"
        m = re.search(pattern, self.get("/metrics"))
        return float(m.group(m.lastindex)) if m else None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
        self.log.close()


def events(kube, node: str, reason: str) -> list[dict]:
    return [e for e in kube.list_raw("/api/v1/namespaces/default/events")
            if (e.get("involvedObject") or {}).get("name") == node and e.get("reason") == reason]


def annotation(kube, node: str, key: str) -> str | None:
    return (kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}).get(key)


def new_node(lab, name: str, kernel: str) -> float:
    kube = lab.kube()
    started = time.monotonic()
    add_node(kube, NodeSpec(name, kernel, "ubuntu", "22.04", driver="580.173.02"), branch="580",
             registry=lab.registry)
    return started
