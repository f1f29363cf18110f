"""The groups of flags several commands share, as keyword-only bags a command's own bag inherits (its flags as
given: `CheckFlags(**locals())` in the command, whose parameters these fields mirror)."""

from __future__ import annotations

from dataclasses import dataclass

from gpualign.cli.fleet import AllContextsOpt, ContextsOpt, RequestTimeoutOpt
from gpualign.cli.options import (
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    NoHeadersOpt,
    OutputOpt,
    TrustedKeyOpt,
)


@dataclass(frozen=True, kw_only=True)
class RegistryFlags:
    """How the registry is read: credentials, plain-HTTP hosts, the keys images must be signed by."""

    docker_config: DockerConfigOpt
    insecure_registry: InsecureRegistryOpt
    trusted_key: TrustedKeyOpt


@dataclass(frozen=True, kw_only=True)
class FleetReportFlags:
    """A report over one cluster or several: its format, and the clusters read."""

    output: OutputOpt
    no_headers: NoHeadersOpt
    kubeconfig: KubeconfigOpt
    context: ContextsOpt
    all_contexts: AllContextsOpt
    request_timeout: RequestTimeoutOpt
