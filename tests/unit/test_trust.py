"""The system's trust store: OpenSSL's compiled-in CA paths, or the user's $SSL_CERT_FILE / $SSL_CERT_DIR, else the
well-known bundle files (a Python whose OpenSSL looks where this system keeps nothing). A real CA, made here."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from gpualign.base import trust
from gpualign.lab import pki


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return pki.create(tmp_path_factory.mktemp("trust-ca"))


def _trusts(ctx: ssl.SSLContext, ca_cert: Path) -> bool:
    wanted = ssl.PEM_cert_to_DER_cert(ca_cert.read_text())
    return wanted in ctx.get_ca_certs(binary_form=True)


def _openssl_looks_in(monkeypatch, where: Path) -> None:
    real = ssl.get_default_verify_paths()
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: real._replace(
        openssl_cafile=str(where / "cert.pem"), openssl_capath=str(where / "certs")))


def test_a_bundle_file_is_read_when_openssl_looks_where_there_is_nothing(ca, tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    _openssl_looks_in(monkeypatch, tmp_path / "absent")
    assert not _trusts(trust.system_context(bundles=()), ca.ca_cert)
    ctx = trust.system_context(bundles=(str(tmp_path / "none.crt"), str(ca.ca_cert)))
    assert _trusts(ctx, ca.ca_cert)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_no_bundle_is_added_where_openssl_finds_its_own(ca, tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "1a2b3c4d.0").write_text("")  # a hashed directory, as c_rehash leaves one
    _openssl_looks_in(monkeypatch, tmp_path)
    assert not _trusts(trust.system_context(bundles=(str(ca.ca_cert),)), ca.ca_cert)


def test_the_users_ssl_cert_file_is_the_choice(ca, tmp_path, monkeypatch):
    _openssl_looks_in(monkeypatch, tmp_path / "absent")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))
    ctx = trust.system_context(bundles=(str(tmp_path / "other.crt"),))
    assert _trusts(ctx, ca.ca_cert)  # read by OpenSSL from the variable, no bundle added
