"""The system's trust store, as one verified TLS context: what a registry, and a cluster whose kubeconfig names no CA,
are checked against.

`ssl.create_default_context()` loads the CA paths OpenSSL was built with, or those $SSL_CERT_FILE / $SSL_CERT_DIR
name. A Python whose OpenSSL was built elsewhere (pyenv's, a manylinux build) looks in a directory this system may not
have, and would trust nothing; the well-known bundle files of Debian, Fedora/RHEL, SUSE and Alpine are then read, as
httpx's default context does."""

from __future__ import annotations

import os
import re
import ssl

BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
           "/etc/ssl/cert.pem", "/etc/pki/tls/cert.pem", "/etc/ssl/ca-bundle.pem")
_HASHED = re.compile(r"[0-9a-fA-F]{8}\.\d+")  # a CA certificate named by its subject hash (c_rehash's 1a2b3c4d.0)


def system_context(bundles: tuple[str, ...] = BUNDLES) -> ssl.SSLContext:
    """A client context verifying certificates and host names against the system's CAs."""
    ctx = ssl.create_default_context()
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ctx  # the user's choice, as OpenSSL reads it
    paths = ssl.get_default_verify_paths()
    if os.path.isfile(paths.openssl_cafile) or _hashed_dir(paths.openssl_capath):
        return ctx
    found = next((b for b in bundles if os.path.isfile(b)), None)
    if found is not None:
        ctx.load_verify_locations(cafile=found)
    return ctx


def _hashed_dir(path: str) -> bool:
    """A directory of CA certificates named by their subject hash, as OpenSSL reads one."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(_HASHED.fullmatch(n) for n in names)

