"""The registry client's HTTP exchanges over the standard library's HTTP/1.1 client: one request, its answer read
whole, within a deadline and a size bound.

Why not httpx (the HTTP stack of lightkube's writes): importing and setting it up costs a read command such as
`check --ledger registry://…` about 0.1 s of CPU (httpcore with HTTP/2, anyio and h11 come with it) to read one
tag list of a few kilobytes; `http.client` costs a few milliseconds. What a registry needs is here: kept-alive
connections per origin (one idle connection is tested before it is used again: a registry closes idle ones),
redirects followed (at most MAX_REDIRECTS; credentials are never sent to another origin), TLS verified as httpx
verifies it on Linux (the system's CAs, or SSL_CERT_FILE / SSL_CERT_DIR) and set up only for an https:// URL, a
gzip answer decoded. Like the httpx client it replaces, it uses no proxy. Large blobs streamed into files still go
through httpx (`RegistryClient.blob_to_file`), as does any client a test gives an httpx transport.

A failure is a `TransportFailure` whose `kind` says what happened: "timeout", "cut" (the answer broke off),
"connect" (no connection), or "other" (a refused TLS handshake included); the registry client words it.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import orjson

from gpualign import __version__
from gpualign.base.transport import FailureKind, TransportFailure

MAX_REDIRECTS = 20  # httpx's default
USER_AGENT = f"gpualign/{__version__}"
REDIRECTS = (301, 302, 303, 307, 308)


class Headers(dict[str, str]):
    """An answer's headers, looked up by any case of their name (a repeated header's values joined by ", ")."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def add(self, name: str, value: str) -> None:
        """One header line as read: a repeated name's values are joined, as HTTP allows."""
        name = name.lower()
        previous = super().get(name)
        self[name] = value if previous is None else f"{previous}, {value}"


@dataclass(slots=True)
class Reply:
    """One answer, its body read whole (and decoded)."""

    status_code: int
    content: bytes
    headers: Headers = field(default_factory=Headers)

    def json(self) -> Any:
        return orjson.loads(self.content)


def _same_origin(a: str, b: str) -> bool:
    x, y = urlsplit(a), urlsplit(b)
    return (x.scheme, x.hostname, x.port) == (y.scheme, y.hostname, y.port)


class Exchanges:
    """Kept-alive connections to the origins one registry client speaks to; safe to share between threads (a
    connection serves one exchange at a time)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                from gpualign.base.trust import system_context

                self._tls = system_context()  # the system's CAs; SSL_CERT_FILE / SSL_CERT_DIR honoured
            return self._tls

    def _connection(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        key = (scheme, host, port)
        with self._lock:
            idle = self._idle.get(key) or []
            while idle:
                conn = idle.pop()
                sock = conn.sock
                # readable while idle: the server closed it (or broke the protocol); a fresh one is made instead
                if sock is not None and not select.select([sock], [], [], 0)[0]:
                    return conn
                conn.close()
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._context())
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    def _keep(self, scheme: str, host: str, port: int, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault((scheme, host, port), []).append(conn)

    def close(self) -> None:
        with self._lock:
            for conns in self._idle.values():
                for conn in conns:
                    conn.close()
            self._idle.clear()

    def exchange(self, method: str, url: str, headers: dict[str, str], content: bytes | None, *,
                 deadline: float, max_body: int, too_large: str) -> Reply:
        """One exchange, redirects followed; its body at most max_body bytes (a LARGE TransportFailure saying
        too_large beyond), all of it by `deadline` (time.monotonic())."""
        for _ in range(MAX_REDIRECTS + 1):
            reply = self._once(method, url, headers, content, deadline, max_body, too_large)
            location = reply.headers.get("location")
            if reply.status_code not in REDIRECTS or not location:
                return reply
            target = urljoin(url, location)
            if not _same_origin(url, target):
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            if reply.status_code == 303 and method != "HEAD" or reply.status_code in (301, 302) and method == "POST":
                method, content = "GET", None
            url = target
        raise TransportFailure(FailureKind.OTHER, f"more than {MAX_REDIRECTS} redirects")

    def _once(self, method: str, url: str, headers: dict[str, str], content: bytes | None, deadline: float,
              max_body: int, too_large: str) -> Reply:
        parts = urlsplit(url)
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname:
            raise TransportFailure(FailureKind.OTHER, f"cannot fetch {url[:100]!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransportFailure(FailureKind.TIMEOUT, "")
        conn = self._connection(scheme, parts.hostname, port)
        conn.timeout = remaining  # no step of this exchange waits past its deadline
        if conn.sock is not None:
            conn.sock.settimeout(remaining)
        headers = {"User-Agent": USER_AGENT, **headers}
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = False
        try:
            conn.request(method, target, body=content, headers=headers)
            sent = True
            resp = conn.getresponse()
            body = _read(resp, method, deadline, max_body, too_large)
        except TransportFailure:
            conn.close()
            raise
        except (TimeoutError, ssl.SSLError, OSError, http.client.HTTPException) as err:
            conn.close()
            raise _failure(err, sent) from None
        reply = Reply(resp.status, body, Headers())
        for name, value in resp.getheaders():
            reply.headers.add(name, value)
        if resp.will_close:
            conn.close()
        else:
            self._keep(scheme, parts.hostname, port, conn)
        return reply


def _read(resp: http.client.HTTPResponse, method: str, deadline: float, max_body: int, too_large: str) -> bytes:
    if method == "HEAD":
        resp.close()
        return b""
    encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 16) if encoding in ("gzip", "x-gzip") else \
        zlib.decompressobj() if encoding == "deflate" else None
    body = bytearray()
    while True:
        chunk = resp.read1(1 << 16)
        if not chunk:
            break
        if decoder is not None:
            try:
                chunk = decoder.decompress(chunk, max_body + 1 - len(body))
            except zlib.error:
                raise TransportFailure(FailureKind.CUT, "an answer whose compressed body is broken") from None
        body += chunk
        if len(body) > max_body:
            raise TransportFailure(FailureKind.LARGE, too_large)
        if time.monotonic() > deadline:
            raise TransportFailure(FailureKind.SLOW, "still arriving")
    if resp.length:  # the connection closed before the Content-Length it announced
        raise TransportFailure(FailureKind.CUT, "")
    resp.close()  # read to its end: the connection can take the next request
    return bytes(body)


def _failure(err: BaseException, sent: bool) -> TransportFailure:
    if isinstance(err, TimeoutError):
        return TransportFailure(FailureKind.TIMEOUT, "")
    if isinstance(err, (http.client.IncompleteRead, http.client.RemoteDisconnected)) or \
            sent and isinstance(err, (ConnectionResetError, BrokenPipeError)):
        return TransportFailure(FailureKind.CUT, "")
    why = " ".join(str(err).split())[:200] or err.__class__.__name__
    if isinstance(err, ssl.SSLError):
        return TransportFailure(FailureKind.OTHER, why)
    if isinstance(err, OSError) and not sent:
        return TransportFailure(FailureKind.CONNECT, why)
    return TransportFailure(FailureKind.OTHER, why)
