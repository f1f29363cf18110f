"""Security against the real lab: a wrong CA fails closed, in one line, for the API server and for a registry; at
DEBUG the controller's log holds no token, client key or registry credential."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from gpualign.lab import pki
from tests.support.cli import run_cli
from tests.support.controller import Controller
from tests.support.lab import token_kubeconfig
from tests.tag_server import tag_server

pytestmark = [pytest.mark.lab]


def test_an_api_server_signed_by_another_ca_fails_closed_in_one_line(lab, tmp_path):
    other = pki.create(tmp_path / "other-ca")  # a CA that did not sign the lab's serving certificate
    wrong = tmp_path / "wrong-ca.yaml"
    wrong.write_text(lab.kubeconfig.read_text().replace(str(lab.state_dir / "pki" / "ca.crt"), str(other.ca_cert)))
    assert str(other.ca_cert) in wrong.read_text()
    res = run_cli("check", "--kubeconfig", str(wrong), "--ledger", f"registry://{lab.registry}/nvidia/driver",
                  "--driver-branch", "580")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "CERTIFICATE_VERIFY_FAILED" in res.err and res.out == ""


@pytest.fixture
def tls_registry(tmp_path):
    """An https 'registry' on 127.0.0.1 whose certificate comes from a CA nobody trusts."""
    made = pki.create(tmp_path / "registry-ca")
    with tag_server(cert=(made.serving_cert, made.serving_key)) as (port, seen):
        yield f"127.0.0.1:{port}", seen


def test_a_registry_signed_by_another_ca_fails_closed_in_one_line(tls_registry, tmp_path):
    host, seen = tls_registry
    nodes = tmp_path / "nodes.json"
    nodes.write_text('{"kind": "List", "items": []}')
    res = run_cli("check", "--nodes-file", str(nodes), "--ledger", f"https://{host}/nvidia/driver",
                  "--driver-branch", "580")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "CERTIFICATE_VERIFY_FAILED" in res.err or "certificate verify failed" in res.err
    assert seen == []  # no request got through: no fallback to plain http, nothing read


def test_at_debug_the_controller_logs_no_secret(lab, tmp_path):
    kube = lab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpualign-system"}})
    lab.kubectl("create", "clusterrolebinding", "t-debug-admin", "--clusterrole", "cluster-admin",
                "--serviceaccount=gpualign-system:debug-logs")
    kc = token_kubeconfig(lab, "gpualign-system", "debug-logs", tmp_path / "token.yaml", "debug")
    token = kc.read_text().split('token: "', 1)[1].split('"', 1)[0]
    docker = tmp_path / "docker"
    docker.mkdir()
    user, secret = "robot", "s3cr3t-Pa55word"
    basic = base64.b64encode(f"{user}:{secret}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {lab.registry: {"auth": basic}}}))
    ctl = Controller(lab, "--docker-config", str(docker / "config.json"), "--ledger-refresh", "1",
                     kubeconfig=kc, identity="debug", env={"GPUALIGN_LOG_LEVEL": "DEBUG"})
    try:
        time.sleep(4)  # a few ledger re-reads and watch cycles
    finally:
        ctl.stop()
    log = Path(ctl.log.name).read_text()
    assert "DEBUG" in log  # it really logged at DEBUG
    admin_key = (lab.state_dir / "pki" / "admin.key").read_text().splitlines()[1]
    for needle in (token, token[:40], secret, basic, admin_key):
        assert needle not in log
