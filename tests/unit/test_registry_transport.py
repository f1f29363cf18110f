"""The registry client's transport: plain http:// never sets TLS up; every https:// URL (the registry, or where a
plain-http registry redirects to) is verified as httpx verifies it, against the trusted CAs (SSL_CERT_FILE here),
and refused otherwise. Real servers on 127.0.0.1, a real CA."""

from __future__ import annotations

import httpx2
import pytest

from gpualign.base.errors import Unreachable
from gpualign.lab import pki
from gpualign.ledger import registry
from gpualign.ledger.transport import LazyTLSTransport
from tests.tag_server import tag_server


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return pki.create(tmp_path_factory.mktemp("registry-ca"))  # serving certificate for 127.0.0.1


@pytest.fixture
def tls_server(ca):
    """An https registry on 127.0.0.1 serving a tag list; the paths it was asked for."""
    with tag_server(cert=(ca.serving_cert, ca.serving_key)) as served:
        yield served


@pytest.fixture
def plain_server(tls_server):
    """A plain-http registry on 127.0.0.1 that serves its tags itself, or redirects /v2/moved/… to the https one."""
    tls_port, _ = tls_server
    with tag_server(redirect=("/v2/moved/", f"https://127.0.0.1:{tls_port}/v2/nvidia/driver/tags/list?n=1000")) \
            as (port, _):
        yield port


def _client(url: str, transport: LazyTLSTransport | None = None) -> registry.RegistryClient:
    return registry.connect(url, timeout=5.0, transport=transport)


def test_plain_http_never_sets_tls_up(plain_server):
    transport = LazyTLSTransport()
    client = _client(f"http://127.0.0.1:{plain_server}/nvidia/driver", transport)
    try:
        assert client.tags() == ["580-5.15.0-124-generic-ubuntu22.04"]
        assert not transport.tls_made
    finally:
        client.close()


def test_https_is_verified_against_the_trusted_cas(tls_server, ca, monkeypatch):
    port, seen = tls_server
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    client = _client(f"https://127.0.0.1:{port}/nvidia/driver")  # the default transport, as every command uses
    try:
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            client.tags()
        assert seen == []
    finally:
        client.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))  # now the CA that signed it is trusted
    client = _client(f"https://127.0.0.1:{port}/nvidia/driver")
    try:
        assert client.tags() == ["580-5.15.0-124-generic-ubuntu22.04"]
        assert seen == ["/v2/nvidia/driver/tags/list?n=1000"]
    finally:
        client.close()


def test_a_redirect_from_plain_http_to_https_is_verified(plain_server, tls_server, ca, monkeypatch):
    tls_port, seen = tls_server
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    transport = LazyTLSTransport()
    client = _client(f"http://127.0.0.1:{plain_server}/moved/driver", transport)
    try:
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            client.tags()
        assert transport.tls_made and seen == []  # refused at the handshake: nothing was asked of it
    finally:
        client.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))
    client = _client(f"http://127.0.0.1:{plain_server}/moved/driver")
    try:
        assert client.tags() == ["580-5.15.0-124-generic-ubuntu22.04"]
        assert seen == ["/v2/nvidia/driver/tags/list?n=1000"]
    finally:
        client.close()


def test_the_plain_transports_tls_trusts_nothing(tls_server, ca, monkeypatch):
    """Were the plain transport ever asked to speak TLS, it would refuse, even to a CA the environment trusts."""
    port, seen = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))
    transport = LazyTLSTransport()
    with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        transport._plain.handle_request(httpx2.Request("GET", f"https://127.0.0.1:{port}/v2/"))
    assert seen == [] and not transport.tls_made
    transport.close()
