"""Registry references as users write them (registry://HOST[:PORT]/REPO, oci://, https://, or HOST/REPO), parsed
into where a registry is and how to speak to it: https, except on loopback or for a registry the user allowed plain
http to (--insecure-registry). Pure but for that allowance, which a run sets once at its start. The client that
speaks to a registry is gpualign.ledger.registry."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.base.errors import BadInput

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class RegistryRef:
    """registry://HOST[:PORT]/REPO (https; http on loopback) or oci://HOST/REPO, or HOST/REPO."""

    host: str
    repo: str
    scheme: str

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}"

    @property
    def image(self) -> str:
        return f"{self.host}/{self.repo}"

    def __str__(self) -> str:
        return f"registry://{self.host}/{self.repo}"


_INSECURE: set[str] = set()  # HOST[:PORT] the user allowed plain http to (--insecure-registry)


def allow_insecure(hosts: list[str] | None) -> None:
    """Registries (HOST or HOST:PORT) to speak plain http to although they are not on this machine."""
    _INSECURE.update(h.strip().rstrip("/") for h in hosts or [] if h.strip())


def _insecure_allowed(host: str, hostname: str) -> bool:
    return host in _INSECURE or hostname in _INSECURE


class BadReference(BadInput):
    """A registry reference that cannot be used: `subject` names it as given, `why` says what is wrong with it."""

    def __init__(self, subject: str, why: str) -> None:
        super().__init__(f"{subject}: {why}")
        self.subject, self.why = subject, why


def parse_ref(text: str) -> RegistryRef:
    """registry://, oci:// or no prefix: https, except on loopback or for a registry allowed by --insecure-registry;
    https:// always; http:// only on loopback or when allowed: plain http elsewhere would carry credentials and the
    ledger in clear, so it is refused."""
    m = re.fullmatch(r"(?:(registry|oci|https?)://)?([^/\s:]+(?::[0-9]+)?)/([a-z0-9][a-z0-9._/-]*?)/?", text.strip())
    if not m:
        raise BadReference(f"registry ledger {text!r}", "expected registry://HOST[:PORT]/REPO")
    prefix, host, repo = m.groups()
    hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    plain_ok = hostname in LOOPBACK or _insecure_allowed(host, hostname)
    if prefix == "http" and not plain_ok:
        raise BadReference(f"registry {host}", "plain http to a registry off this machine is refused (credentials and "
                           f"the ledger would travel in clear); use https, or pass --insecure-registry {host}")
    scheme = "https" if prefix == "https" else "http" if plain_ok else "https"
    return RegistryRef(host=host, repo=repo, scheme=scheme)
