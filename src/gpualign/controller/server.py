"""/metrics, /healthz and the fleet board on one small HTTP server (stdlib; one thread per request)."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpualign.controller.page import render, render_node

log = logging.getLogger("gpualign.controller")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """The standard library prints a traceback on stderr for any failed request; a client that left before its
        answer was written (a probe or a scrape that timed out, a closed browser tab) is not a failure of the
        controller, and anything else is one line in its log (its traceback at debug level)."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError):
            return
        log.error("http: answering %s failed: %s: %s", client_address[0], type(err).__name__, err,
                  exc_info=log.isEnabledFor(logging.DEBUG))


def serve(address: tuple[str, int], registry: Any, view: Callable[[], dict[str, Any]],
          unready: Callable[[], str | None] = lambda: None) -> ThreadingHTTPServer:
    """unready: why this replica should not be counted ready now (a Lease it cannot write), or None."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:  # quiet: metrics scrapes would flood the log
            return

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                why = unready()
                self._send(503 if why else 200, f"{why}\n".encode() if why else b"ok\n", "text/plain")
            elif path == "/api/fleet":
                self._send(200, json.dumps(view()).encode(), "application/json")
            elif path in ("/", "/index.html"):
                self._send(200, render(view()).encode(), "text/html; charset=utf-8")
            elif path.startswith("/node/"):
                from urllib.parse import unquote

                page = render_node(view(), unquote(path.removeprefix("/node/")))
                if page is None:
                    self._send(404, b"no such GPU node\n", "text/plain")
                else:
                    self._send(200, page.encode(), "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain")

    server = _Server(address, Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
