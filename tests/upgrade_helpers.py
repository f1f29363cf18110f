"""Run `gpualign upgrade` as a real process and follow its progress lines."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

# The default lab scenario's five driver pools, as `<kernel>-<os-tag>`: push `595-<pool>` to upgrade them all.
POOLS = ["5.15.0-124-generic-ubuntu22.04", "6.8.0-48-generic-ubuntu24.04", "6.8.0-1015-aws-ubuntu22.04",
         "6.8.0-1017-azure-ubuntu24.04", "6.8.0-1015-gcp-ubuntu22.04"]

# Lines `gpualign upgrade` prints as a node crosses each state boundary, in walk order.
BOUNDARIES = ["→ cordon-required", "→ wait-for-jobs-required", "→ pod-deletion-required", "evicted ",
              "→ pod-restart-required", "restarting driver pod", "→ validation-required", "→ uncordon-required",
              "→ upgrade-done"]


@dataclass
class UpgradeProcess:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _q: queue.Queue[str] = field(default_factory=queue.Queue)

    @classmethod
    def start(cls, env: dict[str, str], *args: str) -> UpgradeProcess:
        proc = subprocess.Popen([sys.executable, "-m", "gpualign", "upgrade", "--yes", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **env})
        self = cls(proc)
        threading.Thread(target=self._pump, daemon=True).start()
        return self

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line)

    def wait_line(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if needle in line:
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None and seen == len(self.lines):
                time.sleep(0.2)
                if not any(needle in ln for ln in self.lines):
                    raise AssertionError(f"upgrade exited {self.proc.returncode} before {needle!r}:\n"
                                         + "\n".join(self.lines[-30:]))
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} after {timeout}s:\n" + "\n".join(self.lines[-30:]))

    def finish(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)
