"""The registry client against the in-repo fake: pagination, auth challenges, and every failure as one line."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx2
import pytest

from gpualign.base.errors import BadInput, Unreachable
from gpualign.ledger.references import RegistryRef, parse_ref
from gpualign.ledger.registry import RegistryClient, docker_credentials
from tests.fake_registry import FakeRegistry

TAGS = [f"580-5.15.0-{i}-generic-ubuntu22.04" for i in range(7)]


def client(fake: FakeRegistry, host: str = "fake.io", **kw) -> RegistryClient:
    return RegistryClient(RegistryRef(host, "nvidia/driver", "https"), transport=fake.transport, **kw)


def test_follows_link_pagination():
    fake = FakeRegistry(TAGS, page_size=2)
    assert sorted(client(fake).tags()) == sorted(TAGS)
    assert len(fake.requests) == 4


def test_page_cap_and_link_loop_are_errors():
    with pytest.raises(Unreachable, match="more than 2 pages"):
        client(FakeRegistry(TAGS, page_size=2), max_pages=2).tags()
    with pytest.raises(Unreachable, match="loops back"):
        client(FakeRegistry(TAGS, page_size=2, link_loop=True)).tags()


def test_anonymous_bearer_token_is_fetched_once_and_reused():
    fake = FakeRegistry(TAGS, auth="bearer")
    assert len(client(fake).tags()) == len(TAGS)
    assert len(fake.token_requests) == 1
    q = fake.token_requests[0].url.params
    assert q["service"] == "fake.io" and q["scope"] == "repository:nvidia/driver:pull"


def test_ngc_proxy_auth_gets_no_service_param():
    fake = FakeRegistry(TAGS, auth="ngc")
    client(fake, host="nvcr.io").tags()
    (tok,) = fake.token_requests
    assert tok.url.path == "/proxy_auth"
    assert "service" not in tok.url.params
    assert tok.url.params["scope"] == "repository:nvidia/driver:pull"


def test_credentials_go_to_the_token_service_and_never_into_errors():
    fake = FakeRegistry(TAGS, auth="ngc", credentials=("$oauthtoken", "nvapi-SECRET"))
    assert len(client(fake, credentials=("$oauthtoken", "nvapi-SECRET")).tags()) == len(TAGS)
    with pytest.raises(Unreachable) as err:
        client(fake, credentials=("$oauthtoken", "WRONG-SECRET")).tags()
    assert "refused the configured credentials" in err.value.message
    assert "SECRET" not in err.value.message


def test_basic_auth_and_a_401_loop_is_an_error_not_a_loop():
    ok = FakeRegistry(TAGS, auth="basic", credentials=("u", "p"))
    assert client(ok, credentials=("u", "p")).tags()
    fake = FakeRegistry(TAGS, auth="basic", credentials=("u", "p"))
    with pytest.raises(Unreachable, match="refused access"):
        client(fake, credentials=("u", "nope")).tags()
    assert len(fake.requests) == 2  # one challenge answered, then given up


@pytest.mark.parametrize("status,expect", [(500, "HTTP 500"), (503, "HTTP 503"), (403, "HTTP 403")])
def test_server_errors_are_one_line(status, expect):
    with pytest.raises(Unreachable, match=expect):
        client(FakeRegistry(TAGS, status_override=status)).tags()


def test_unknown_repository_has_no_tags():
    assert client(FakeRegistry(TAGS, status_override=404)).tags() == []


@pytest.mark.parametrize("body", [b"{not json", b'{"tags": "580"}', b'{"tags": [1, 2]}', b"[]"])
def test_malformed_json(body):
    with pytest.raises(Unreachable, match="not valid JSON"):
        client(FakeRegistry(TAGS, body_override=body)).tags()


def test_timeout_is_one_line():
    def slow(request):
        raise httpx2.ReadTimeout("timed out", request=request)

    c = RegistryClient(RegistryRef("fake.io", "nvidia/driver", "https"), transport=httpx2.MockTransport(slow),
                       timeout=1.5)
    with pytest.raises(Unreachable, match="timed out after 1.5s"):
        c.tags()


def test_parse_ref_forms():
    assert parse_ref("registry://127.0.0.1:5000/nvidia/driver") == RegistryRef("127.0.0.1:5000", "nvidia/driver",
                                                                               "http")
    assert parse_ref("oci://nvcr.io/nvidia/driver").scheme == "https"
    with pytest.raises(BadInput, match="expected registry://"):
        parse_ref("registry://nohost")


def test_docker_config_credentials(tmp_path: Path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"auths": {"nvcr.io": {"auth": base64.b64encode(b"$oauthtoken:key").decode()}}}))
    assert docker_credentials("nvcr.io", cfg) == ("$oauthtoken", "key")
    assert docker_credentials("other.io", cfg) is None
    assert docker_credentials("nvcr.io", tmp_path / "absent.json") is None
    cfg.write_text("{broken")
    with pytest.raises(BadInput, match="unreadable"):
        docker_credentials("nvcr.io", cfg)
