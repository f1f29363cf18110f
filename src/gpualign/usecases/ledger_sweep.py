"""`gpualign build gc`: the driver images and shared-module artifacts no node needs, read from every named cluster and
the ledger, and deleted when asked. The decision is gpualign.ensure.sweep's (pure); this reads what it decides from
and does what it decided, saying each deletion through `progress`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpualign.base.errors import BadInput, GpualignError
from gpualign.base.labels import KERNEL, KERNEL_NEXT
from gpualign.ensure.shared import repository
from gpualign.ensure.sweep import Unused, unused
from gpualign.kube.client import Kube
from gpualign.ledger.registry import connect
from gpualign.model.facts import NodeFacts, node_facts
from gpualign.usecases import archive_next
from gpualign.usecases.refusals import NotARegistry

Say = Callable[[str], None]


@dataclass(frozen=True)
class Sweep:
    """What was read, what goes (or would go) and what stays."""

    ledger: str
    host: str  # the ledger's registry
    images_repo: str
    modules_repo: str
    clusters: tuple[str, ...]  # the contexts read, as their kubeconfigs name them
    kernels: tuple[str, ...]  # every kernel a node runs or announces
    offered: dict[str, str]  # pool -> the kernel Debian's archive installs next on it
    found: Unused  # with delete, all of it is gone (a deletion that fails stops the sweep)

    def repository(self, kind: str) -> str:
        """The repository of an attachment's kind: "images" or "modules"."""
        return self.images_repo if kind == "images" else self.modules_repo

    @property
    def anything(self) -> bool:
        return bool(self.found.images or self.found.modules or self.found.attachments)


def sweep(ledger: str, contexts: Sequence[str | None], *, kubeconfig: str | None, keep_previous: int, delete: bool,
          read_archive: bool, progress: Say, warn: Say) -> Sweep:
    """contexts: the clusters that pull from the ledger (none named: the current one); delete: False is a dry run."""
    if not ledger.startswith("registry://"):
        raise NotARegistry(ledger)
    kernels: set[str] = set()
    read: list[str] = []
    fleet: list[NodeFacts] = []  # every node's facts: the Debian pools whose next kernel the archive names
    for ctx in contexts or [None]:
        with Kube(kubeconfig, ctx) as kube:
            for node in kube.list_raw("/api/v1/nodes"):
                facts = node_facts(node)
                fleet.append(facts)
                info = (node.get("status") or {}).get("nodeInfo") or {}
                kernels.update(k for k in (facts.labels.get(KERNEL), facts.labels.get(KERNEL_NEXT),
                                           info.get("kernelVersion")) if k)
            read.append(kube.describe().get("context") or ctx or "current")
    offered = offered_next(fleet, warn) if read_archive else {}
    done: list[str] = []
    with connect(ledger) as client:
        modules_repo = repository(client.ref.repo)
        images = {t: client.digest(t) for t in client.tags(missing_ok=False)}
        modules = {t: client.digest(t, modules_repo) for t in client.tags(modules_repo)}
        found = unused(images, modules, kernels, keep_previous, offered.values())
        if not kernels and (found.images or found.modules or found.attachments):
            raise BadInput(f"no node in {', '.join(read)} runs or announces a kernel: refusing to sweep every image "
                           "(is this the cluster that pulls from the ledger?)")
        signed = tuple(t for kind, t in found.attachments if kind == "images")
        signed_modules = tuple(t for kind, t in found.attachments if kind == "modules")
        if delete:
            for repo, tags, table in ((client.ref.repo, found.images, images),
                                      (modules_repo, found.modules, modules),
                                      (client.ref.repo, signed, images), (modules_repo, signed_modules, modules)):
                for tag in tags:
                    digest = table[tag]
                    assert digest is not None
                    try:
                        client.delete_manifest(digest, repo)
                    except GpualignError as err:
                        err.message += f" ({len(done)} deleted before it)"
                        raise
                    done.append(f"{repo}:{tag}")
                    progress(f"deleted {client.ref.host}/{repo}:{tag} ({digest})")
        return Sweep(ledger=ledger, host=client.ref.host, images_repo=client.ref.repo, modules_repo=modules_repo,
                     clusters=tuple(read), kernels=tuple(sorted(kernels)),
                     offered=dict(sorted(offered.items())), found=found)


def offered_next(fleet: list[NodeFacts], warn: Say) -> dict[str, str]:
    """pool -> the kernel Debian's archive installs next on it; {} when no Debian node runs, and, said once, when
    the archive could not be read or verified (the newest of each line is still kept)."""
    if not any(f.os_id == "debian" and f.kernel for f in fleet):
        return {}
    why = archive_next.cannot_verify()
    if why is None:
        try:
            return {p.name: p.next.release for p in archive_next.read(fleet, *archive_next.debian_archive()).pools
                    if p.next is not None}
        except GpualignError as err:
            why = err.message
    warn(f"Debian's archive not read ({why}): the kernels it installs next are kept only as their line's newest "
         "(--no-archive says so without trying)")
    return {}
