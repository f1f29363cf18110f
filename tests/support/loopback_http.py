"""A loopback HTTP/1.1 server for tests of gpualign's reads, shaped per test: each request is recorded (path,
headers, client port) and answered by a function of the handler; and a token kubeconfig naming such a server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

Handler = Callable[[BaseHTTPRequestHandler], None]


class Server:
    """A loopback HTTP/1.1 server: each request is recorded (path, headers, client port) and answered by `answer`."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.seen: list[tuple[str, dict[str, str], int]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                outer.seen.append((self.path, dict(self.headers), self.client_address[1]))
                outer.answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    made: list[Server] = []

    def start(answer: Handler) -> Server:
        made.append(Server(answer))
        return made[-1]

    yield start
    for s in made:
        s.close()


def send(h: BaseHTTPRequestHandler, body: bytes, *, status: int = 200, headers: dict[str, str] | None = None,
         length: int | None = None) -> None:
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body) if length is None else length))
    h.end_headers()
    h.wfile.write(body)
    h.wfile.flush()


def loopback_kubeconfig(tmp_path: Path, server: str) -> Path:
    """A kubeconfig for a loopback HTTP server, with a bearer token."""
    path = tmp_path / "kc.yaml"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: abc}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


