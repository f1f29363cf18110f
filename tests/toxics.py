"""Toxiproxy (built from its Go module, `gpualign lab build --only toxiproxy`) between gpualign and the lab: one
proxy per upstream on 127.0.0.1, and faults ("toxics") added and removed through its HTTP API with a few httpx2
calls (the PyPI client is from 2019; the API is four endpoints)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from gpualign.lab import versions
from gpualign.lab.processes import free_port, listens_on


@dataclass
class Toxiproxy:
    proc: subprocess.Popen[bytes]
    api: str
    listens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, log: Path) -> Toxiproxy:
        binary = versions.toxiproxy_binary()
        assert binary.exists(), f"{binary} is missing: `gpualign lab build --only toxiproxy` (make setup builds it)"
        port = free_port()
        proc = subprocess.Popen([str(binary), "-host", "127.0.0.1", "-port", str(port)],
                                stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self = cls(proc, f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                # its own answer: another test's toxiproxy may hold the port, chosen free, and answer there
                if listens_on(proc.pid, port) and httpx2.get(f"{self.api}/version", timeout=1).status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.1)
        proc.kill()
        raise RuntimeError("toxiproxy did not start")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        resp = httpx2.request(method, f"{self.api}{path}", json=body, timeout=10)
        assert resp.status_code < 300, f"toxiproxy {method} {path}: {resp.status_code} {resp.text}"
        return resp.json() if resp.content else None

    def proxy(self, name: str, upstream: str) -> str:
        """A proxy to upstream (HOST:PORT); returns its listen address, 127.0.0.1:PORT."""
        listen = f"127.0.0.1:{free_port()}"
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})
        self.listens[name] = listen
        return listen

    def add(self, proxy: str, name: str, kind: str, *, stream: str = "downstream", toxicity: float = 1.0,
            **attributes: Any) -> None:
        self._call("POST", f"/proxies/{proxy}/toxics", {"name": name, "type": kind, "stream": stream,
                                                         "toxicity": toxicity, "attributes": attributes})

    def remove(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def clear(self) -> None:
        """Every toxic removed and every proxy enabled (POST /reset)."""
        self._call("POST", "/reset")

    def enable(self, proxy: str, enabled: bool) -> None:
        """Disabling a proxy closes every connection through it and refuses new ones."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def proxied_kubeconfig(kubeconfig: Path, listen: str, out: Path) -> Path:
    """The lab's kubeconfig with its server moved to the proxy (the serving certificate names 127.0.0.1, which the
    proxy shares, so TLS verifies as before)."""
    import re

    text = re.sub(r"server: https://127\.0\.0\.1:\d+", f"server: https://{listen}", kubeconfig.read_text())
    out.write_text(text)
    out.chmod(0o600)
    return out
