"""Make driver images exist in a ledger repository: the one way `gpualign ensure`, `gpualign upgrade --ensure` and the
controller's build Jobs (which run `gpualign ensure`) make them. Each tag is planned first (bad input before any
work), then found present, mirrored or built and verified, up to `jobs` at once; a failure stops only its own tag.
Progress is said through `say(tag, message)`; failures are handed to `failed(tag, error)`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpualign.base.errors import BadInput, GpualignError
from gpualign.ensure import run, stage
from gpualign.ensure.ahead import Ahead
from gpualign.ensure.lease import Leases
from gpualign.ensure.outcome import Outcome, TagAction
from gpualign.ensure.request import Request
from gpualign.ensure.sign import SigningKey, from_secret
from gpualign.kube.client import Kube
from gpualign.ledger.references import BadReference
from gpualign.ledger.registry import RegistryClient, connect
from gpualign.loaders.rules import load_rules
from gpualign.model.driver_tag import TagSpec
from gpualign.model.expect import DEFAULT_REPOSITORY
from gpualign.model.tags import Rules, published

NVIDIA = DEFAULT_REPOSITORY  # where published images are mirrored from, unless told otherwise
NO_UPSTREAM = "none"

Say = Callable[[str, str], None]  # (tag, message)
Failed = Callable[[str, GpualignError], None]  # (tag, why it was not made)


class UpstreamUnusable(BadInput):
    """The upstream named cannot be used (`why`; the command line names its flag)."""

    def __init__(self, upstream: str, why: str) -> None:
        super().__init__(f"upstream {upstream!r}: {why}")
        self.upstream, self.why = upstream, why


def ensure_images(req: Request, specs: Sequence[TagSpec], say: Say, failed: Failed,
                  cannot_make: Failed | None = None) -> list[Outcome]:
    """Every image made (or found, or planned with dry_run); what could not be made is handed to `failed`, a
    skippable tag's refusal at planning to `cannot_make`."""
    with contextlib.ExitStack() as clients:
        target = clients.enter_context(connect(req.ledger, docker_config=req.docker_config, timeout=30.0))
        up = _upstream(req)
        if up is not None:
            clients.enter_context(up)
        return _make(req, list(specs), target, up, say, failed, cannot_make or failed)


def _upstream(req: Request) -> RegistryClient | None:
    if req.upstream == NO_UPSTREAM:
        return None
    try:
        return connect(req.upstream or NVIDIA, docker_config=req.docker_config, timeout=30.0)
    except BadReference as err:
        raise UpstreamUnusable(req.upstream or NVIDIA, err.why) from None


def _make(req: Request, specs: list[TagSpec], target: RegistryClient, up: RegistryClient | None, say: Say,
          failed: Failed, cannot_make: Failed) -> list[Outcome]:
    explicit = req.upstream is not None and req.upstream != NO_UPSTREAM
    outcomes: list[Outcome] = []
    leases, lease_kube = None, None
    options: dict[str, stage.Options] = {}
    try:
        in_flight = max(1, min(req.jobs, len(specs))) if not req.dry_run else 1
        if req.lease and not req.dry_run:
            lease_kube = Kube(req.kubeconfig, req.context, field_manager="gpualign-ensure")
            leases = Leases(lease_kube, req.lease, say)  # refused (BadInput) when no Lease can be held there
        # NVIDIA's registry is asked only for what the rules say it publishes (an air-gapped run is not sent to
        # nvcr.io for a tag it never had); an upstream named is asked for every tag
        options = {spec.tag: req.options(spec, specs, target=target, in_flight=in_flight, leases=leases,
                                         upstream=up if explicit or _nvidia_publishes(spec) else None)
                   for spec in specs}
        # What an empty disk's first builds will take from the registry, fetched while the archive is read: for the
        # tags that start at once only (each guess holds a user space's unpacked tree; later tags start after the
        # archive is read, with nothing left to overlap).
        for spec in specs[:in_flight]:
            opts = options[spec.tag]
            if run.worth_fetching_ahead(spec, opts):
                opts.ahead = Ahead.start(spec, target, opts.flavour,
                                         opts.archive.for_tag_kernel(spec.os_tag, spec.kernel),
                                         functools.partial(say, spec.tag), opts.trusted)
        planned: dict[str, run.TagPlan] = {}
        for spec in specs:  # bad tags before any work; a report's tag gpualign cannot make is skipped, and failed
            try:
                planned[spec.tag] = run.plan_one(spec, options[spec.tag])
            except GpualignError as err:
                if spec.tag not in req.skippable:
                    raise
                cannot_make(spec.tag, err)
        specs = [spec for spec in specs if spec.tag in planned]
        if any(p.action == TagAction.BUILD for p in planned.values()) and not req.dry_run:
            run.require_tools(kernel_load=frozenset(
                p.spec.kernel_value.arch_or_amd64 for p in planned.values() if p.action == TagAction.BUILD)
                if req.kernel_load else frozenset(), secure_boot=req.signing is not None)
        if in_flight == 1 or all(p.action == TagAction.PRESENT for p in planned.values()):
            for spec in specs:  # a failure does not stop the others: each image is its own work
                try:
                    outcomes.append(run.ensure_one(spec, options[spec.tag], say, planned[spec.tag]))
                except GpualignError as err:
                    failed(spec.tag, err)
        else:
            with ThreadPoolExecutor(in_flight, thread_name_prefix="ensure") as pool:
                futures = [pool.submit(run.ensure_one, spec, options[spec.tag], say, planned[spec.tag])
                           for spec in specs]
                for spec, future in zip(specs, futures, strict=True):
                    try:
                        outcomes.append(future.result())
                    except GpualignError as err:
                        failed(spec.tag, err)
    finally:
        for opts in options.values():
            if opts.ahead is not None:
                opts.ahead.close()
        if lease_kube is not None:  # closed even when the Lease was refused
            lease_kube.close()
    return outcomes


def _nvidia_publishes(spec: TagSpec) -> bool:
    return spec.family == "ubuntu" and published(spec.branch, spec.kernel, spec.os_tag, _rules())


@functools.cache
def _rules() -> Rules:
    return load_rules()


def signing_key_from_secret(kubeconfig: str | None, context: str | None, namespace: str, name: str,
                            where: str) -> SigningKey:
    """The Secure Boot signing key a Secret holds (KMM's `key`/`cert`, or a kubernetes.io/tls Secret), read from the
    cluster; `where` names it in a refusal."""
    from gpualign.kube.client import Kube  # the cluster client, only when the key is in a Secret

    with Kube(kubeconfig, context) as kube:
        obj = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    return from_secret(obj, where)
