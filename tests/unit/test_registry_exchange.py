"""The registry client's own HTTP exchanges (ledger/exchange.py) on real loopback sockets: kept-alive connections,
one the registry closed while idle, redirects that must not carry credentials to another origin, gzip answers.
(Slow drips, cut bodies, huge pages and refusals: test_registry_loopback.py.)"""

from __future__ import annotations

import gzip
import time

import pytest

from gpualign.base.transport import TransportFailure
from gpualign.ledger.exchange import Exchanges
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from tests.support.loopback_http import send

TAGS = b'{"name": "nvidia/driver", "tags": ["580-6.1.0-41-amd64-debian12"]}'


def _client(url: str) -> RegistryClient:
    return RegistryClient(RegistryRef(url.removeprefix("http://"), "nvidia/driver", "http"), timeout=5.0)


def _get(exchanges: Exchanges, url: str, headers: dict[str, str] | None = None):
    return exchanges.exchange("GET", url, headers or {}, None, deadline=time.monotonic() + 5, max_body=1 << 20,
                              too_large="too large")


def test_reads_share_one_kept_alive_connection(serve):
    srv = serve(lambda h: send(h, TAGS, headers={"Content-Type": "application/json"}))
    client = _client(srv.url)
    try:
        assert client.tags() == client.tags() == ["580-6.1.0-41-amd64-debian12"]
    finally:
        client.close()
    assert len(srv.seen) == 2 and srv.seen[0][2] == srv.seen[1][2]  # one client port: one connection
    assert srv.seen[0][1]["User-Agent"].startswith("gpualign/")


def test_a_connection_the_registry_closed_while_idle_is_not_used_again(serve):
    def answer_then_hang_up(h) -> None:
        send(h, TAGS)  # kept alive as far as the client knows (no "Connection: close")
        h.close_connection = True

    srv = serve(answer_then_hang_up)
    client = _client(srv.url)
    try:
        assert client.tags() == ["580-6.1.0-41-amd64-debian12"]
        time.sleep(0.1)  # the server's side is closed by now
        assert client.tags() == ["580-6.1.0-41-amd64-debian12"]
    finally:
        client.close()
    assert srv.seen[0][2] != srv.seen[1][2]  # a new connection, not an error


def test_a_redirect_to_another_origin_carries_no_credentials(serve):
    storage = serve(lambda h: send(h, b"blob"))
    registry = serve(lambda h: send(h, b"", status=307, headers={"Location": f"{storage.url}/signed?x=1"})
                     if h.path.startswith("/moved") else send(h, b"here"))
    exchanges = Exchanges(5.0)
    try:
        same = _get(exchanges, f"{registry.url}/v2/x", {"Authorization": "Bearer secret"})
        moved = _get(exchanges, f"{registry.url}/moved", {"Authorization": "Bearer secret"})
    finally:
        exchanges.close()
    assert (same.status_code, same.content, moved.status_code, moved.content) == (200, b"here", 200, b"blob")
    assert registry.seen[0][1]["Authorization"] == "Bearer secret"
    assert storage.seen[0][0] == "/signed?x=1" and "Authorization" not in storage.seen[0][1]


def test_redirects_end(serve):
    srv = serve(lambda h: send(h, b"", status=302, headers={"Location": "/again"}))
    exchanges = Exchanges(5.0)
    try:
        with pytest.raises(TransportFailure, match="more than 20 redirects"):
            _get(exchanges, f"{srv.url}/start")
    finally:
        exchanges.close()


def test_a_gzip_answer_is_decoded_and_bounded_by_its_decoded_size(serve):
    packed = gzip.compress(TAGS)
    bomb = gzip.compress(b"0" * (4 << 20))  # 4 MiB once decoded, a few KiB on the wire
    srv = serve(lambda h: send(h, bomb if h.path == "/bomb" else packed, headers={"Content-Encoding": "gzip"}))
    exchanges = Exchanges(5.0)
    try:
        assert _get(exchanges, f"{srv.url}/tags").json()["tags"] == ["580-6.1.0-41-amd64-debian12"]
        with pytest.raises(TransportFailure) as err:
            _get(exchanges, f"{srv.url}/bomb")
        assert (err.value.kind, err.value.detail) == ("large", "too large")
    finally:
        exchanges.close()
