"""What a run of ensure is asked to make, and how: the one bag the command line hands in (`gpualign ensure`,
`gpualign upgrade --ensure`, a build Job's `gpualign ensure`). Each tag's stage.Options is derived from it here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.ensure.stage import Options
from gpualign.judging.judge import OFF, STRICT
from gpualign.model.flavours import Flavour
from gpualign.model.makers import SUITES, debian_suite

if TYPE_CHECKING:
    from gpualign.ensure.lease import Leases
    from gpualign.ensure.sign import SigningKey
    from gpualign.ledger.registry import RegistryClient
    from gpualign.model.driver_tag import TagSpec


@dataclass(frozen=True, kw_only=True)
class Request:
    """What to make, and how."""

    ledger: str  # registry://HOST[:PORT]/REPO: the repository to fill
    upstream: str | None = None  # mirrored from; None: NVIDIA's registry, for the tags it publishes; "none": never
    docker_config: Path | None = None
    dry_run: bool = False
    jobs: int = 2  # images at once, and compile jobs in all
    flavour: str | None = None  # every image's kernel modules; None: `flavours`' word for the tag, else proprietary
    flavours: Mapping[str, str] = field(default_factory=dict)
    modules_from: Path | None = None  # verify and push these modules instead of compiling
    signing: SigningKey | None = None  # Secure Boot signing of every module
    lease: str | None = None  # a namespace: a Lease per image on the cluster while it is made
    kubeconfig: str | None = None
    context: str | None = None
    verify_modules: bool = False  # judge a present image's modules too
    replace_wrong: bool = False
    shared_modules: bool = True
    # tags a report named: one gpualign cannot make is handed to `cannot_make`, and the others still go on
    skippable: frozenset[str] = frozenset()
    upstream_keys: tuple[Any, ...] = ()  # the upstream's public keys: a mirror's signature verified before the copy
    trusted: tuple[Any, ...] = ()  # keys a present image and what other builds shared must be signed by
    cosign_key: Any = None  # what signs the images pushed and what they share (ensure.cosign_keys); None: unsigned
    kernel_load: bool = True  # each build's modules loaded into their own kernel, booted in a VM, before the push

    def options(self, spec: TagSpec, specs: list[TagSpec], *, target: RegistryClient,
                upstream: RegistryClient | None, in_flight: int, leases: Leases | None) -> Options:
        """One tag's options in a run of `specs`, `in_flight` at once (the compile jobs shared among them); upstream:
        the registry its image may be mirrored from, or None."""
        return Options(target=target, upstream=upstream, dry_run=self.dry_run, jobs=max(1, self.jobs // in_flight),
                       flavour=self.flavour or self.flavours.get(spec.tag, Flavour.PROPRIETARY),
                       modules_from=self.modules_from, signing=self.signing, leases=leases,
                       authfile=str(self.docker_config) if self.docker_config else None,
                       check_present=STRICT if self.verify_modules else OFF, replace_wrong=self.replace_wrong,
                       share_pull=self.shared_modules, share_push=self.shared_modules,
                       upstream_keys=self.upstream_keys, cosign_key=self.cosign_key, kernel_load=self.kernel_load,
                       trusted=self.trusted,
                       together=_built_together(spec, specs))


def _built_together(spec: TagSpec, specs: list[TagSpec]) -> tuple[str, ...]:
    """The kernels of the run's tags one build root serves with spec's (the same Debian suite)."""
    return tuple(s.kernel for s in specs if s.os_tag in SUITES and debian_suite(s.os_tag) == debian_suite(spec.os_tag))
