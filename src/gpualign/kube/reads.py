"""Reads from the API server over the standard library's HTTP/1.1 client, over a few kept-alive connections.

Why not the HTTP stack the writes use (lightkube's httpx2): a read-only command (check, status, why) spends about a
quarter of a second importing and configuring that stack, a large part of the whole command against a small
cluster. `http.client` costs a few milliseconds, and reads a large LIST page with less CPU. Only what reads need is
here: GET and HEAD, bearer token (a token file is read again when it changes, as kubelet rotates it), basic auth,
client certificates, gzip, a server with a path prefix. Everything else (writes, watches, exec credential plugins)
goes through lightkube.

A failure is a `TransportFailure` (gpualign.base.transport, shared with the registry client) whose `kind` (a
FailureKind) says what the caller may do about it: CONNECT (no connection was made), CUT (a connection broke during
the exchange), TIMEOUT (with the step that waited) or OTHER.
"""

from __future__ import annotations

import base64
import errno
import http.client
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

from gpualign.base.transport import FailureKind, TransportFailure


def nobody_there(err: BaseException | None) -> bool:
    """Whether a failure to connect (or what caused it, as an HTTP library wraps it) says that nothing answered: a
    refused connection, a name that does not resolve, no route to the host."""
    while err is not None:
        if isinstance(err, (ConnectionRefusedError, socket.gaierror)) or \
                getattr(err, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return True
        err = err.__cause__ or err.__context__
    return False


@dataclass(slots=True)
class Answer:
    """An HTTP answer read whole: the status, the (decoded) body and the headers, names in lower case."""

    status_code: int
    content: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def _load_client_pem(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """A client certificate or key given inline (client-certificate-data, client-key-data): ssl loads chains only
    from files, so the PEM goes to a private temporary file (mode 0600) for the moment it is loaded."""
    with tempfile.NamedTemporaryFile(prefix="gpualign-client-") as f:
        f.write(cert_pem + b"\n" + key_pem)
        f.flush()
        ctx.load_cert_chain(f.name)


def _pem(entry: Mapping[str, Any], key: str) -> bytes:
    """The PEM of `key`-data (base64) if given, else of the file `key` names, else none (a key can sit in the
    certificate's own PEM)."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    return Path(str(entry[key])).read_bytes() if entry.get(key) else b""


def tls_context(cluster: Mapping[str, Any], user: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context a kubeconfig's cluster and user entries describe (their files already absolute), as lightkube
    makes it. Raises ssl.SSLError, OSError or ValueError (bad base64 included) when the material is unusable."""
    if cluster.get("certificate-authority"):
        ctx = ssl.create_default_context(cafile=str(cluster["certificate-authority"]))
    elif cluster.get("certificate-authority-data"):
        ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    else:
        from gpualign.base.trust import system_context

        ctx = system_context()
        if cluster.get("insecure-skip-tls-verify") is True:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    if user.get("client-certificate-data") or user.get("client-key-data"):
        _load_client_pem(ctx, _pem(user, "client-certificate"), _pem(user, "client-key"))
    elif user.get("client-certificate"):
        ctx.load_cert_chain(str(user["client-certificate"]), str(user.get("client-key") or "") or None)
    return ctx


class _Credentials:
    """The Authorization header of a kubeconfig user: a token, a token file (read again when it changes), or a
    user name and password; none for a client certificate."""

    def __init__(self, user: Mapping[str, Any]) -> None:
        self._file = str(user["tokenFile"]) if user.get("tokenFile") else None
        self._stamp: tuple[int, int] | None = None
        self._header: str | None = None
        if self._file is None and user.get("token"):
            self._header = f"Bearer {str(user['token']).strip()}"
        elif self._file is None and user.get("username") and user.get("password"):
            pair = f"{user['username']}:{user['password']}".encode()
            self._header = f"Basic {base64.b64encode(pair).decode()}"
        self._lock = threading.Lock()

    def header(self) -> str | None:
        if self._file is None:
            return self._header
        with self._lock:
            try:
                st = os.stat(self._file)
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    with open(self._file) as f:
                        self._header = f"Bearer {f.read().strip()}"
                    self._stamp = stamp
            except OSError as err:
                raise TransportFailure(FailureKind.OTHER, f"token file {self._file}: {err.strerror}") from None
            return self._header


class Reader:
    """GETs to one API server. Thread-safe: a request takes an idle connection (or opens one) and gives it back
    when its answer is read; at most IDLE are kept open between requests."""

    IDLE = 8

    def __init__(self, server: str, context: ssl.SSLContext | None, user: Mapping[str, Any], *, timeout: float,
                 headers: Mapping[str, str]) -> None:
        url = urlsplit(server)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"server {server!r} is not an http(s) URL")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._context = context
        self._timeout = timeout
        self._credentials = _Credentials(user)
        self.headers = dict(headers)
        self._idle: list[http.client.HTTPConnection] = []
        self._closed = False
        self._lock = threading.Lock()

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and conn.sock is not None and len(self._idle) < self.IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def get(self, path: str, *, params: Mapping[str, Any] | None = None, accept: str = "application/json",
            method: str = "GET") -> Answer:
        """One GET (or HEAD), its answer read whole. A kept-alive connection the server had closed is opened again
        once, silently; any other failure is a TransportFailure, and the connection is dropped."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = {**self.headers, "Accept": accept}
        auth = self._credentials.header()
        if auth:
            headers["Authorization"] = auth
        for fresh_try in (False, True):
            conn = self._take() if not fresh_try else self._take_fresh()
            reused = conn.sock is not None
            try:
                answer = self._exchange(conn, method, target, headers)
            except TransportFailure as err:
                conn.close()
                # A server closes an idle kept-alive connection without a word: the first write or read on it
                # fails before any answer. That is not a failure of this request.
                if reused and not fresh_try and err.kind == FailureKind.CUT and err.step == "before the answer":
                    continue
                raise
            self._give(conn)
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(self, conn: http.client.HTTPConnection, method: str, target: str,
                  headers: Mapping[str, str]) -> Answer:
        step = "connecting"
        try:
            if conn.sock is None:
                conn.connect()
            step = "sending the request"
            conn.request(method, target, headers=dict(headers))
            step = "waiting for its answer"
            resp = conn.getresponse()
            step = "reading the answer"
            body = resp.read()
        except TimeoutError:
            waited = "waiting for its answer" if step == "reading the answer" else step
            raise TransportFailure(FailureKind.TIMEOUT, "timed out", waited) from None
        except (http.client.HTTPException, OSError) as err:  # resets, refusals, TLS errors, short bodies
            if step == "connecting":
                raise TransportFailure(FailureKind.CONNECT, _said(err), refused=nobody_there(err)) from None
            raise TransportFailure(FailureKind.CUT, _said(err),
                                   "reading the answer" if step == "reading the answer" else "before the answer") \
                from None
        found = {k.lower(): v for k, v in resp.getheaders()}
        if found.get("content-encoding") == "gzip" and body:
            import zlib

            try:
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
            except zlib.error as err:
                raise TransportFailure(FailureKind.CUT, f"a gzip answer that does not decompress: {err}",
                                       "reading the answer") from None
        return Answer(resp.status, body, found)

    def _take_fresh(self) -> http.client.HTTPConnection:
        with self._lock:  # the other idle ones are as old as the one the server closed
            stale, self._idle = self._idle, []
        for conn in stale:
            conn.close()
        return self._take()

    def close(self) -> None:
        """Closes the idle connections; one in use is closed when its request ends."""
        with self._lock:
            self._closed = True
            conns, self._idle = self._idle, []
        for conn in conns:
            conn.close()


def _said(err: BaseException) -> str:
    if isinstance(err, http.client.IncompleteRead):
        return f"the connection closed after {len(err.partial)} bytes of the answer"
    return str(err) or err.__class__.__name__
