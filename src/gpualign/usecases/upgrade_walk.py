"""`gpualign upgrade` against a cluster, over one connection: the ledger named (or found in the GPU Operator's
objects), read and judged; the snapshot and the preflight; with --ensure, the missing images made first; then the
walk, under the Lease that keeps two walks from running at once. The command line asks, renders and confirms; this
owns the cluster client and says what it does through the callbacks it is given."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as with_fields
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from gpualign.base import labels as L
from gpualign.base.errors import BadInput, Refused
from gpualign.judging.judge import judge
from gpualign.kube.client import Kube
from gpualign.kube.inventory import read_operator_config
from gpualign.ledger.sources import Ledger, is_registry
from gpualign.model.image_ref import tag_of
from gpualign.model.ledger import Refusal
from gpualign.model.tags import Rules
from gpualign.upgrade import snapshot
from gpualign.upgrade.lock import hold
from gpualign.upgrade.operator_walk import refusal, walked_by_operator
from gpualign.upgrade.preflight import Preflight, preflight
from gpualign.upgrade.run import Outcome, walk
from gpualign.upgrade.snapshot import Snapshot
from gpualign.upgrade.upgrade_policy import UpgradePolicy
from gpualign.usecases.ledgers import load_ledger
from gpualign.usecases.nodes import Say, quiet

# (the ledger's sources, the missing target tags, tag -> the Secure Boot nodes that need it): makes them, or raises
EnsureMissing = Callable[[list[str], list[str], dict[str, list[str]]], None]


class NoLedger(BadInput):
    """No ledger was named, and no GPU Operator object names an image repository."""


@dataclass(frozen=True)
class UpgradeRequest:
    selector: str | None
    branch: str | None
    ledger: list[str]  # as given (empty: the GPU Operator's objects name it)
    policy: UpgradePolicy
    dry_run: bool
    ensure_images: bool
    modules: str  # how target images' modules are checked (judging.judge: AUTO, STRICT, OFF)
    rules: Rules
    docker_config: Path | None
    lock_namespace: str
    timeout: float
    trusted: tuple[Any, ...] = ()  # the keys a target image must be signed by (none: signatures not checked)


@dataclass(frozen=True)
class Prepared:
    """What the walk starts from: the ledger named and read, the cluster's snapshot, the preflight's verdict."""

    ledger: list[str]
    available: Ledger
    snap: Snapshot
    pre: Preflight


class UpgradeSession:
    def __init__(self, kubeconfig: str | None, context: str | None, timeout: float | None = None, *,
                 say: Say = quiet, warn: Say = quiet, progress: Say = quiet) -> None:
        self.kube = Kube(kubeconfig, context, timeout=timeout, field_manager="gpualign-upgrade")
        self.say, self.warn, self.progress = say, warn, progress

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.kube.close()

    @property
    def cluster(self) -> dict[str, Any]:
        return self.kube.describe()

    def prepare(self, req: UpgradeRequest, ensure_missing: EnsureMissing) -> Prepared:
        """The ledger, the snapshot and the preflight; with ensure_images, the missing images made first (and all
        read again). Refused beside the GPU Operator's own walk, before any write."""
        kube, selector, branch, pol = self.kube, req.selector, req.branch, req.policy
        # as check does: beside the GPU Operator, its objects name the repositories
        ledger = req.ledger or self._ledger_from_operator(selector, req.rules, branch)

        def read() -> tuple[Ledger, Snapshot]:
            available = load_ledger(ledger, req.docker_config, missing_ok=req.ensure_images, say=self.say,
                                    warn=self.warn)
            snap = snapshot.take(kube, selector, ledger=available, rules=req.rules, to_branch=branch,
                                 budgets=pol.admission == "pdb-aware")
            if not snap.nodes:
                raise BadInput(f"no GPU nodes match {selector or 'nvidia.com/gpu.present=true'}")
            return self._judged(req, ledger, available, snap)

        available, snap = read()
        config, _ = read_operator_config(kube, tuple(s.facts for s in snap.nodes.values()))
        walked = walked_by_operator(config, snap)
        if config is not None and walked:  # before any write: no Lease, no label, no DaemonSet patch
            raise Refused(refusal(config, walked))
        pre = preflight(kube, snap, pol)
        to_make = sorted({t for n, t in pre.missing_images if not snap.nodes[n].view.image_problem})
        if req.ensure_images and to_make:
            ensure_missing(ledger, to_make, secure_boot_nodes(snap, to_make))
            if not req.dry_run:  # read again: the walk starts at "image ensured"
                available, snap = read()
                pre = preflight(kube, snap, pol)
        return Prepared(ledger, available, snap, pre)

    def walk(self, req: UpgradeRequest, ready: Prepared, report: Callable[[str, str], None],
             on_pass: Callable[[Snapshot], None] = lambda _snap: None) -> Outcome:
        """The walk, under the Lease that keeps two walks from running at once."""
        with hold(self.kube, req.lock_namespace):
            return walk(self.kube, req.selector, req.policy, ledger=ready.available, rules=req.rules,
                        to_branch=req.branch, report=report, timeout=req.timeout, on_pass=on_pass)

    def _ledger_from_operator(self, selector: str | None, rules: Rules, branch: str | None) -> list[str]:
        """No ledger named: the GPU Operator's objects, when there are some, name the image repositories (as for
        check); a node the operator walks is refused first, since that is the answer whatever the ledger says."""
        snap = snapshot.take(self.kube, selector, ledger=None, rules=rules, to_branch=branch)
        config, _ = read_operator_config(self.kube, tuple(s.facts for s in snap.nodes.values()))
        if config is not None and (walked := walked_by_operator(config, snap)):
            raise Refused(refusal(config, walked))
        repositories = sorted({s.repository for s in (config.sources if config else ())
                               if s.repository and not s.problem})
        if not repositories:
            raise NoLedger("no ledger was named, and no GPU Operator objects name a repository here")
        return [f"registry://{r}" for r in repositories]

    def _judged(self, req: UpgradeRequest, ledger: list[str], available: Ledger,
                snap: Snapshot) -> tuple[Ledger, Snapshot]:
        """The ledger told which target images must not be walked to, and the snapshot read again with it: never
        cordon a node for an image that would not load there, or that could not be checked where checks were
        asked."""
        refused = self._judge_targets(ledger, snap, req.docker_config, req.modules, req.trusted)
        if not refused:
            return available, snap
        available = with_fields(available, refused=tuple(r for _, r in sorted(refused.items())))
        return available, snapshot.take(self.kube, req.selector, ledger=available, rules=req.rules,
                                         to_branch=req.branch, budgets=req.policy.admission == "pdb-aware")

    def _judge_targets(self, ledger: list[str], snap: Snapshot, docker_config: Path | None,
                       modules: str, trusted: tuple[Any, ...] = ()) -> dict[str, Refusal]:
        """tag -> why the walk must not move a node to it: present but wrong (its labels; its modules, checked as
        the node's kernel would load them), or, with module checks asked for, not verified. The same judgement check
        makes (judging/judge.py)."""
        kernels: dict[str, set[str | None]] = {}
        secure: set[str] = set()  # tags some Secure Boot node needs
        for n in snap.nodes.values():
            if n.view.target_tag and n.view.image_present and n.view.needs_upgrade:
                kernels.setdefault(n.view.target_tag, set()).add(n.facts.kernel)
                if n.facts.labels.get(L.SECURE_BOOT) == "enabled":
                    secure.add(n.view.target_tag)
        found: dict[str, Refusal] = {}
        for source in (s for s in ledger if is_registry(s)):
            repo = source.split("://", 1)[1].rstrip("/")
            started = time.monotonic()
            verdict = judge({f"{repo}:{tag}": ks for tag, ks in kernels.items()}, docker_config=docker_config,
                            modules=modules, secure_boot={f"{repo}:{tag}" for tag in secure}, unlabelled=False,
                            trusted=trusted)
            for w in verdict.warnings:
                self.warn(w)
            for image, symbols in sorted(verdict.verified.items()):
                self.progress(f"preflight: {tag_of(image)}: modules verified ({symbols} symbol CRCs)")
            if verdict.verified:
                self.progress(f"preflight: {len(verdict.verified)} image(s) verified in "
                              f"{time.monotonic() - started:.1f}s")
            for image, why in verdict.wrong.items():
                tag = tag_of(image)
                found.setdefault(tag, Refusal(tag, why))
            for image, why in verdict.unverified.items():
                tag = tag_of(image)
                found.setdefault(tag, Refusal(tag, why, unverified=True))
        return found


def secure_boot_nodes(snap: Snapshot, tags: list[str]) -> dict[str, list[str]]:
    """tag -> the Secure Boot nodes (labelled gpualign.io/secure-boot=enabled) that need it."""
    out: dict[str, list[str]] = {}
    for name, n in sorted(snap.nodes.items()):
        if n.target_tag in tags and n.facts.labels.get(L.SECURE_BOOT) == "enabled":
            out.setdefault(n.target_tag or "", []).append(name)
    return out
