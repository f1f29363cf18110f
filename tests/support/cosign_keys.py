"""Signing keys and a registry of its own, for the signature tests: an ECDSA P-256 key pair written as PEM files
(what gpualign signs with and trusts), and Debian's docker-registry on a free 127.0.0.1 port."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpualign.lab import docker_registry, processes
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient


def key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """folder/NAME.key (PKCS#8, unencrypted) and folder/NAME.pub (SubjectPublicKeyInfo)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def lab_tool(binary: Path) -> Path:
    """A reference tool `gpualign lab build` made (cosign, policy-controller's policy-tester), there to run."""
    assert os.access(binary, os.X_OK), f"{binary}: `gpualign lab build` builds it (make setup runs it)"
    return binary


@contextmanager
def own_registry(folder: Path) -> Iterator[RegistryClient]:
    """A client of a registry of its own (repository nvidia/driver), stopped after."""
    proc = docker_registry.start(folder)
    client = RegistryClient(RegistryRef(host=proc.address, repo="nvidia/driver", scheme="http"), timeout=10.0)
    try:
        yield client
    finally:
        client.close()
        processes.stop(proc)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryClient]:
    """A fixture (tests/conftest.py offers it): a client of a registry of its own, for the signing tests."""
    with own_registry(tmp_path / "registry") as client:
        yield client
