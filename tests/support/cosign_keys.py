"""Signing keys and a registry of its own, for the signature tests: an ECDSA P-256 key pair written as PEM files
(what gpualign signs with and trusts), and Debian's docker-registry on a free 127.0.0.1 port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpualign.lab import docker_registry, processes
from gpualign.ledger.registry import RegistryClient, RegistryRef


def key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """folder/NAME.key (PKCS#8, unencrypted) and folder/NAME.pub (SubjectPublicKeyInfo)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


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
