"""Reads over the standard library's HTTP client (`gpualign.kube.reads`), against a loopback HTTP/1.1 server shaped per
test: decoding, keep-alive, a kept-alive connection the server closed, answers cut short, refusals, silence, token
files that change, a server with a path prefix; and, through `Kube`, retries and the light import of a read."""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

import pytest

from gpualign.base.errors import Forbidden, Unreachable
from gpualign.base.transport import FailureKind, TransportFailure
from gpualign.kube import reads
from gpualign.kube.client import Kube
from tests.support.loopback_http import loopback_kubeconfig, send


def a_reader(url: str, user: dict | None = None, timeout: float = 5.0) -> reads.Reader:
    return reads.Reader(url, None, user or {}, timeout=timeout, headers={"User-Agent": "gpualign/test",
                                                                      "Accept-Encoding": "gzip"})


def test_a_gzip_answer_is_decoded_and_the_connection_is_kept_between_reads(serve):
    srv = serve(lambda h: send(h, gzip.compress(b'{"kind":"NodeList","items":[]}'),
                               headers={"Content-Encoding": "gzip"}))
    w = a_reader(srv.url)
    try:
        first = w.get("/api/v1/nodes", params={"limit": 500, "labelSelector": "a=b,c"})
        second = w.get("/api/v1/nodes")
    finally:
        w.close()
    assert first.status_code == 200 and first.json() == {"kind": "NodeList", "items": []} and second.json()
    assert srv.seen[0][0] == "/api/v1/nodes?limit=500&labelSelector=a%3Db%2Cc"
    assert srv.seen[0][1]["User-Agent"] == "gpualign/test" and srv.seen[0][1]["Accept-Encoding"] == "gzip"
    assert srv.seen[0][2] == srv.seen[1][2]  # one connection for both


def test_threads_that_come_and_go_share_the_idle_connections_and_leave_none_behind(serve):
    """A walk or the controller reads from new threads every pass: their requests reuse the connections kept idle,
    and closing the reader closes them."""
    import threading

    srv = serve(lambda h: send(h, b"{}"))
    w = a_reader(srv.url)
    for _ in range(20):
        t = threading.Thread(target=w.get, args=("/x",))
        t.start()
        t.join()
    assert len({port for _, _, port in srv.seen}) == 1
    two = [threading.Thread(target=w.get, args=("/slow",)) for _ in range(2)]
    for t in two:
        t.start()
    for t in two:
        t.join()
    assert len(w._idle) <= 2
    w.close()
    assert w._idle == []


def test_a_chunked_answer_is_read_whole(serve):
    def chunked(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for part in (b'{"items":[', b'{"a":1}', b"]}"):
            h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")

    w = a_reader(serve(chunked).url)
    try:
        assert w.get("/x").json() == {"items": [{"a": 1}]}
    finally:
        w.close()


def test_a_kept_alive_connection_the_server_closed_is_opened_again_without_a_failure(serve):
    def once_then_close(h: BaseHTTPRequestHandler) -> None:
        send(h, b"{}")
        h.close_connection = True  # closed after the answer, which said nothing of it

    srv = serve(once_then_close)
    w = a_reader(srv.url)
    try:
        assert w.get("/a").json() == {}
        time.sleep(0.1)
        assert w.get("/b").json() == {}
    finally:
        w.close()
    assert [p for p, _, _ in srv.seen] == ["/a", "/b"] and srv.seen[0][2] != srv.seen[1][2]


def test_an_answer_cut_short_is_a_cut_and_says_how_much_arrived(serve):
    def short(h: BaseHTTPRequestHandler) -> None:
        send(h, b'{"items":', length=100)
        h.close_connection = True

    w = a_reader(serve(short).url)
    with pytest.raises(TransportFailure) as err:
        w.get("/x")
    w.close()
    assert err.value.kind == "cut" and err.value.detail == "the connection closed after 9 bytes of the answer"


def test_a_refused_connection_is_a_connect_failure():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(TransportFailure) as err:
        a_reader(f"http://127.0.0.1:{port}").get("/x")
    assert err.value.kind == "connect" and "Connection refused" in err.value.detail and err.value.refused


@pytest.fixture
def resets_every_connection():
    """A TCP server that takes each connection and resets it (RST) at once: an HTTPS client's handshake breaks."""
    import struct
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.05)
    stop = threading.Event()

    def reset_all() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            conn.recv(1024)  # the ClientHello, so that the reset comes in the handshake
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    t = threading.Thread(target=reset_all, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    srv.close()


def test_a_connection_reset_in_its_handshake_is_a_connect_failure_of_a_link_not_of_a_server_that_is_not_there(
        resets_every_connection):
    import httpx2

    from gpualign.kube.client import _httpx_failure

    w = reads.Reader(resets_every_connection, reads.tls_context({"insecure-skip-tls-verify": True}, {}), {},
                     timeout=5, headers={})
    with pytest.raises(TransportFailure) as err:
        w.get("/x")
    assert err.value.kind == "connect" and not err.value.refused, err.value.detail
    with httpx2.Client(verify=False) as client, pytest.raises(httpx2.ConnectError) as sent:
        client.post(resets_every_connection + "/x", content=b"{}")
    said = _httpx_failure(sent.value)  # how the writes' HTTP stack says the same
    assert said.kind == "connect" and not said.refused, said.detail
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with httpx2.Client() as client, pytest.raises(httpx2.ConnectError) as refused:
        client.post(f"http://127.0.0.1:{port}/x", content=b"{}")
    assert _httpx_failure(refused.value).refused


def test_any_request_never_sent_is_sent_again_and_a_write_cut_once_sent_is_left_to_its_caller(serve, tmp_path,
                                                                                              monkeypatch):
    """A link that resets new connections in their handshake (a fifth of them, say) breaks writes as often as
    reads: a POST whose connection was never made was never sent, and is sent again; one cut after it was sent
    may have taken effect, and is not replayed here."""
    import types

    from gpualign.kube import client as kube_module

    waits: list[float] = []
    monkeypatch.setattr(kube_module, "time", types.SimpleNamespace(sleep=waits.append))
    kube = Kube(str(loopback_kubeconfig(tmp_path, serve(lambda h: send(h, b"{}")).url)))
    outcomes: list[object] = []
    sent: list[str] = []

    def send_next(method, path, *_args):  # noqa: ANN001, ANN202 - Kube._send's shape
        sent.append(method)
        step = outcomes.pop(0)
        if isinstance(step, TransportFailure):
            raise step
        return reads.Answer(201, b"{}")

    monkeypatch.setattr(kube, "_send", send_next)
    handshake = TransportFailure(FailureKind.CONNECT, "[Errno 104] Connection reset by peer")
    try:
        outcomes[:] = [handshake] * 5 + [None]
        assert kube.request("POST", "/api/v1/namespaces/default/events", body={}).status_code == 201
        assert sent == ["POST"] * 6 and waits == [0.1, 0.2, 0.4, 0.8, 1.0]
        sent.clear(), waits.clear()
        outcomes[:] = [TransportFailure(FailureKind.CUT, "[Errno 104] Connection reset by peer")]
        with pytest.raises(Unreachable, match="Connection reset by peer"):
            kube.request("POST", "/api/v1/namespaces/default/events", body={})
        assert sent == ["POST"] and waits == []
        sent.clear()
        outcomes[:] = [TransportFailure(FailureKind.CONNECT, "[Errno 111] Connection refused", refused=True)] * 4
        with pytest.raises(Unreachable, match="Connection refused"):
            kube.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/y", body={})
        assert len(sent) == 4 and waits == [0.1, 0.2, 0.4]  # a server that is not there is said so within a second
    finally:
        kube.close()


def test_a_server_that_never_answers_is_a_timeout_while_waiting_for_its_answer(serve):
    w = a_reader(serve(lambda h: time.sleep(2)).url, timeout=0.3)
    with pytest.raises(TransportFailure) as err:
        w.get("/x")
    w.close()
    assert (err.value.kind, err.value.step) == ("timeout", "waiting for its answer")


def test_a_token_file_is_read_again_when_kubelet_rotates_it(serve, tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    srv = serve(lambda h: send(h, b"{}"))
    w = a_reader(srv.url, {"tokenFile": str(token), "token": "ignored"})
    try:
        w.get("/a")
        token.write_text("second-and-longer\n")
        w.get("/b")
    finally:
        w.close()
    assert [h["Authorization"] for _, h, _ in srv.seen] == ["Bearer first", "Bearer second-and-longer"]


def test_a_missing_token_file_is_named(tmp_path):
    w = a_reader("http://127.0.0.1:9", {"tokenFile": str(tmp_path / "gone")})
    with pytest.raises(TransportFailure, match=f"token file {tmp_path}/gone: No such file or directory"):
        w.get("/x")


def test_a_servers_path_prefix_is_kept_and_basic_auth_is_sent(serve):
    srv = serve(lambda h: send(h, b"{}"))
    w = a_reader(srv.url + "/k8s/clusters/c-1/", {"username": "ann", "password": "pw"})
    try:
        w.get("/api/v1/nodes", params={"limit": 1})
    finally:
        w.close()
    assert srv.seen[0][0] == "/k8s/clusters/c-1/api/v1/nodes?limit=1"
    assert srv.seen[0][1]["Authorization"] == "Basic YW5uOnB3"


def test_kube_reads_again_after_cuts_and_names_the_server_when_they_do_not_stop(serve, tmp_path, monkeypatch):
    import types

    from gpualign.kube import client as kube_module

    waits: list[float] = []
    monkeypatch.setattr(kube_module, "time", types.SimpleNamespace(sleep=waits.append))
    cuts = {"left": 2}

    def flaky(h: BaseHTTPRequestHandler) -> None:
        if cuts["left"] > 0:
            cuts["left"] -= 1
            send(h, b'{"a"', length=50)
            h.close_connection = True
        else:
            send(h, b'{"kind":"Status","message":"nope"}' if h.path.startswith("/forbidden") else b'{"a":1}',
                 status=403 if h.path.startswith("/forbidden") else 200)

    srv = serve(flaky)
    kube = Kube(str(loopback_kubeconfig(tmp_path, srv.url)))
    try:
        assert kube.get_json("/x") == {"a": 1}  # two cuts, then the answer
        assert waits == [0.1, 0.2]
        with pytest.raises(Forbidden, match=rf"GET /forbidden on {srv.url}: forbidden \(HTTP 403\): nope") as refused:
            kube.get_json("/forbidden")
        assert not refused.value.retryable and len(waits) == 2  # a 403 is not tried again: a role helps, not time
        cuts["left"] = 99
        with pytest.raises(Unreachable) as err:
            kube.get_json("/y")
        assert err.value.message == (f"API server {srv.url} unreachable: the connection closed after 4 bytes of "
                                     "the answer")
        assert waits[2:] == [0.1, 0.2, 0.4, 0.8] + [1.0] * 6  # ten tries again, as client-go's on a reset
    finally:
        kube.close()
    assert srv.seen[0][1]["Authorization"] == "Bearer abc"


def test_a_read_imports_neither_lightkube_nor_httpx2(serve, tmp_path):
    srv = serve(lambda h: send(h, b'{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"n"}}]}'))
    path = loopback_kubeconfig(tmp_path, srv.url)
    code = (f"import sys; from gpualign.kube.client import Kube; k = Kube({str(path)!r}); "
            "assert [i['metadata']['name'] for i in k.nodes()] == ['n']; k.close(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightkube', 'httpx2', 'httpcore2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_user_with_an_exec_plugin_is_read_through_lightkube_with_the_plugins_token(serve, tmp_path):
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", "
                      "\"kind\": \"ExecCredential\", \"status\": {\"token\": \"from-exec\"}}'\n")
    plugin.chmod(0o755)
    srv = serve(lambda h: send(h, b'{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"n"}}]}'))
    path = tmp_path / "kc.yaml"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{srv.url}"}}}}]
users: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: "{plugin}"}}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    kube = Kube(str(path))
    try:
        assert [n["metadata"]["name"] for n in kube.nodes()] == ["n"]
    finally:
        kube.close()
    assert srv.seen[0][1]["Authorization"] == "Bearer from-exec"
    assert srv.seen[0][1]["User-Agent"].startswith("gpualign/")


def test_inline_client_certificates_and_cas_make_the_same_tls_as_files(tmp_path):
    import base64
    import ssl

    from gpualign.lab import pki

    made = pki.create(tmp_path / "pki")
    b64 = {n: base64.b64encode(p.read_bytes()).decode() for n, p in
           (("ca", made.ca_cert), ("cert", made.dir / "admin.crt"), ("key", made.dir / "admin.key"))}
    inline = reads.tls_context({"certificate-authority-data": b64["ca"]},
                              {"client-certificate-data": b64["cert"], "client-key-data": b64["key"]})
    files = reads.tls_context({"certificate-authority": str(made.ca_cert)},
                             {"client-certificate": str(made.dir / "admin.crt"),
                              "client-key": str(made.dir / "admin.key")})
    assert inline.get_ca_certs() == files.get_ca_certs() and inline.verify_mode == ssl.CERT_REQUIRED
    combined = base64.b64encode((made.dir / "admin.crt").read_bytes() + (made.dir / "admin.key").read_bytes())
    reads.tls_context({}, {"client-certificate-data": combined.decode()})  # the key inside the certificate's PEM
    with pytest.raises(ssl.SSLError):
        reads.tls_context({}, {"client-certificate-data": b64["cert"]})  # no key anywhere
    assert reads.tls_context({"insecure-skip-tls-verify": True}, {}).verify_mode == ssl.CERT_NONE
