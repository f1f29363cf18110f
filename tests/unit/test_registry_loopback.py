"""The registry client against a misbehaving registry on a real loopback socket (not a mock transport).

Slow drips, truncated bodies, huge pages, hangs, 401 loops and Link loops, fixed and fuzzed: every case ends with a
tag list or one `Unreachable` line, within the client's deadline, with memory bounded by MAX_BODY.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpualign.base.errors import Unreachable
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import MAX_BODY, RegistryClient
from tests.support.cli import run_cli


@dataclass
class Behaviour:
    status: int = 200
    body: bytes = b'{"tags": []}'
    declared_length: int | None = None  # Content-Length sent; None: the real length
    chunk: int = 1 << 16
    chunk_delay: float = 0.0
    hang_before_headers: float = 0.0
    link: str | None = None
    www_authenticate: str | None = None
    requests: list[str] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        b = self.server.behaviour  # type: ignore[attr-defined]
        b.requests.append(self.path)
        if b.hang_before_headers:
            time.sleep(b.hang_before_headers)
        try:
            self.send_response(b.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(b.declared_length if b.declared_length is not None
                                                   else len(b.body)))
            if b.link:
                self.send_header("Link", b.link)
            if b.www_authenticate:
                self.send_header("WWW-Authenticate", b.www_authenticate)
            self.end_headers()
            for i in range(0, len(b.body), b.chunk):
                self.wfile.write(b.body[i:i + b.chunk])
                self.wfile.flush()
                if b.chunk_delay:
                    time.sleep(b.chunk_delay)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should
        self.close_connection = True


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.behaviour = Behaviour()  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def client(srv: ThreadingHTTPServer, timeout: float = 1.5) -> RegistryClient:
    return RegistryClient(RegistryRef(f"127.0.0.1:{srv.server_address[1]}", "nvidia/driver", "http"),
                          timeout=timeout)


def behave(srv: ThreadingHTTPServer, **kw: object) -> Behaviour:
    srv.behaviour = Behaviour(**kw)  # type: ignore[attr-defined]
    return srv.behaviour  # type: ignore[attr-defined,no-any-return]


def tags_or_error(srv: ThreadingHTTPServer, timeout: float = 1.5) -> tuple[list[str] | None, str, float]:
    c = client(srv, timeout)
    t0 = time.monotonic()
    try:
        return c.tags(), "", time.monotonic() - t0
    except Unreachable as err:
        return None, err.message, time.monotonic() - t0
    finally:
        c.close()


def test_a_slow_drip_is_cut_at_the_deadline(server):
    body = json.dumps({"tags": [f"t{i}" for i in range(200)]}).encode()
    behave(server, body=body, chunk=8, chunk_delay=0.05)  # ~10 s to send it all; every read is quick
    tags, message, took = tags_or_error(server, timeout=1.5)
    assert tags is None and "timed out after 1.5s" in message and "still arriving" in message
    assert took < 3.0


def test_a_hang_before_headers_times_out(server):
    behave(server, hang_before_headers=3.0)
    tags, message, took = tags_or_error(server, timeout=1.0)
    assert tags is None and "timed out after 1s" in message
    assert took < 2.5


def test_a_truncated_body_is_one_line(server):
    behave(server, body=b'{"tags": ["580-', declared_length=4096)
    tags, message, _ = tags_or_error(server)
    assert tags is None and message.endswith("was cut short") and "\n" not in message


def test_a_huge_page_is_refused_without_reading_it_all(server):
    behave(server, body=b" " * (MAX_BODY + (4 << 20)), chunk=1 << 20)
    tags, message, _ = tags_or_error(server, timeout=10)
    assert tags is None and f"larger than {MAX_BODY >> 20} MiB" in message


def test_a_link_loop_and_a_401_loop_end(server):
    behave(server, body=b'{"tags": ["a"]}', link='</v2/nvidia/driver/tags/list?n=1000>; rel="next"')
    tags, message, _ = tags_or_error(server)
    assert tags is None and "loops back" in message
    b = behave(server, status=401, www_authenticate='Basic realm="x"')
    tags, message, _ = tags_or_error(server)
    assert tags is None and "HTTP 401" in message and len(b.requests) <= 2


def test_the_cli_says_one_line_for_a_truncating_registry(server, tmp_path):
    behave(server, body=b'{"tags": [', declared_length=1 << 20)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"items": [{"metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/kernel-version.full": "5.15.0-124-generic",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}}]}))
    res = run_cli("check", "--nodes-file", str(nodes), "--driver-branch", "580",
                  "--ledger", f"registry://127.0.0.1:{server.server_address[1]}/nvidia/driver", timeout=60)
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpualign: error:") and "cut short" in lines[0], res.err


latin1 = st.text(alphabet=st.characters(max_codepoint=255), max_size=30)  # what an HTTP header can carry
bodies = st.one_of(
    st.binary(max_size=2000),
    st.lists(st.text(max_size=30), max_size=50).map(lambda t: json.dumps({"tags": t}).encode()),
    st.builds(lambda v: json.dumps(v).encode(), st.recursive(
        st.none() | st.integers() | st.text(max_size=10),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["tags", "name", "x"]), c, max_size=3),
        max_leaves=10)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(status=st.sampled_from([200, 200, 200, 401, 403, 404, 429, 500, 502]), body=bodies,
       cut=st.one_of(st.none(), st.integers(0, 50)), delay=st.sampled_from([0.0, 0.0, 0.01, 0.2]),
       link=st.one_of(st.none(), st.just('</v2/nvidia/driver/tags/list?n=1000>; rel="next"'),
                      st.just('<http://elsewhere.example/v2/x>; rel="next"'), latin1),
       auth=st.one_of(st.none(), st.just('Basic realm="r"'), st.just('Bearer realm="http://127.0.0.1:9/t"'),
                      latin1))
def test_fuzzed_registry_responses_end_in_tags_or_one_line(server, status, body, cut, delay, link, auth):
    declared = None if cut is None else len(body) + cut + 1  # promise more than is sent: a truncated body
    behave(server, status=status, body=body, declared_length=declared, chunk=64, chunk_delay=delay,
           link=link if link and "\n" not in link and "\r" not in link else None,
           www_authenticate=auth if auth and "\n" not in auth and "\r" not in auth else None)
    tags, message, took = tags_or_error(server, timeout=1.0)
    if tags is None:
        assert message and "\n" not in message
    else:
        assert all(isinstance(t, str) for t in tags)
    assert took < 1.0 * 2 + 1.5  # the deadline, once per request (a challenge may add a second)


def test_nothing_listens_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = RegistryClient(RegistryRef(f"127.0.0.1:{port}", "nvidia/driver", "http"), timeout=1.0)
    with pytest.raises(Unreachable) as err:
        c.tags()
    assert err.value.message == f"registry 127.0.0.1:{port} unreachable: [Errno 111] Connection refused"
