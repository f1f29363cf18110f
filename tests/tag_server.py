"""A minimal registry on 127.0.0.1 for transport tests: it answers every GET with one tag list (or, under a given
path prefix, a redirect), over plain http or TLS with a given certificate, and records the paths it was asked for."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TAGS = b'{"name": "nvidia/driver", "tags": ["580-5.15.0-124-generic-ubuntu22.04"]}'


@contextmanager
def tag_server(cert: tuple[Path, Path] | None = None,
               redirect: tuple[str, str] | None = None) -> Iterator[tuple[int, list[str]]]:
    """(port, paths asked for). cert: (serving certificate, key) for TLS; redirect: (path prefix, Location)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.path)
            moved = redirect is not None and self.path.startswith(redirect[0])
            self.send_response(307 if moved else 200)
            if redirect is not None and moved:
                self.send_header("Location", redirect[1])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "0" if moved else str(len(TAGS)))
            self.end_headers()
            if not moved:
                self.wfile.write(TAGS)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if cert is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*cert)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
