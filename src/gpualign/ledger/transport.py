"""The registry client's HTTP transport: TLS set up only when an https:// URL is first requested.

httpx makes a client's verified TLS context (the CA bundle loaded and parsed: ~16 ms here) when the client is made,
whether or not it will ever speak TLS. A ledger served over plain http (a registry on localhost, the lab's) never
needs it, and for a warm `ensure` or a `check` of a fleet that is a visible share of the run. Here every https:// URL
(a registry, a token realm, a redirect to blob storage) still goes through httpx's own transport with its default,
verified TLS, made once on first use; plain http:// URLs go through a transport whose TLS context trusts nothing, so
if it were ever asked to speak TLS it would refuse rather than skip verification.
"""

from __future__ import annotations

import ssl
import threading

import httpx2


class LazyTLSTransport(httpx2.BaseTransport):
    def __init__(self) -> None:
        self._plain = httpx2.HTTPTransport(verify=_trusts_nothing())
        self._tls: httpx2.HTTPTransport | None = None
        self._lock = threading.Lock()

    @property
    def tls_made(self) -> bool:
        """Whether an https:// URL has been asked for (and the verified transport made)."""
        return self._tls is not None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.scheme == "http":
            return self._plain.handle_request(request)
        return self._secure().handle_request(request)

    def _secure(self) -> httpx2.HTTPTransport:
        with self._lock:
            if self._tls is None:
                self._tls = httpx2.HTTPTransport()  # httpx's defaults: verified against the CA bundle
            return self._tls

    def close(self) -> None:
        self._plain.close()
        with self._lock:
            if self._tls is not None:
                self._tls.close()


def _trusts_nothing() -> ssl.SSLContext:
    """A client context that verifies certificates and host names but holds no CA: every TLS handshake fails."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED are its defaults
