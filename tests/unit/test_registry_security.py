"""Registry transport security: plain http off this machine is refused unless --insecure-registry names the host,
and no credential reaches a log, even at DEBUG."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from gpualign.base.errors import BadInput
from gpualign.ledger import references, registry
from tests.fake_registry import FakeRegistry
from tests.support.cli import run_cli


@pytest.fixture(autouse=True)
def no_insecure_hosts():
    yield
    references._INSECURE.clear()


def test_plain_http_off_this_machine_is_refused_unless_allowed():
    with pytest.raises(BadInput, match="plain http to a registry off this machine is refused.*"
                                       "--insecure-registry registry.example.com"):
        references.parse_ref("http://registry.example.com/nvidia/driver")
    assert references.parse_ref("registry://registry.example.com/nvidia/driver").scheme == "https"
    assert references.parse_ref("http://127.0.0.1:5000/nvidia/driver").scheme == "http"  # loopback
    references.allow_insecure(["registry.example.com"])
    assert references.parse_ref("http://registry.example.com/nvidia/driver").scheme == "http"
    assert references.parse_ref("registry://registry.example.com/nvidia/driver").scheme == "http"
    assert references.parse_ref("https://registry.example.com/nvidia/driver").scheme == "https"


def test_the_cli_refuses_in_one_line_before_connecting(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text('{"kind": "List", "items": []}')
    res = run_cli("check", "--nodes-file", str(nodes), "--ledger", "http://registry.example.com:5000/nvidia/driver",
                  "--driver-branch", "580")
    assert res.code == 2 and res.err.count("\n") == 1
    assert "--insecure-registry registry.example.com:5000" in res.err


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_no_credential_reaches_a_log_at_debug(caplog, auth, tmp_path):
    user, secret = "robot$ci", "s3cr3t-Pa55word"
    fake = FakeRegistry(["580-a-ubuntu22.04"], auth=auth, credentials=(user, secret))
    config = tmp_path / "config.json"
    basic = base64.b64encode(f"{user}:{secret}".encode()).decode()
    config.write_text(json.dumps({"auths": {"fake.io": {"auth": basic}}}))
    caplog.set_level(logging.DEBUG)
    client = registry.connect("registry://fake.io/nvidia/driver", docker_config=config, transport=fake.transport)
    try:
        assert client.tags() == ["580-a-ubuntu22.04"]
    finally:
        client.close()
    assert fake.requests  # it really authenticated
    logged = caplog.text
    for needle in (secret, base64.b64encode(f"{user}:{secret}".encode()).decode(), FakeRegistry.TOKEN):
        assert needle not in logged
