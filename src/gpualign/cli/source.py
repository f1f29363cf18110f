"""Where a command's nodes come from (a cluster through a kubeconfig, or a dump file), read once for check, plan and
cuda check, with the record every JSON report carries and the one line a terminal user sees."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.errors import BadInput

_DRIVER_TAG = re.compile(r"\d{3}")

if TYPE_CHECKING:
    from gpualign.inventory import Inventory, OperatorView


@dataclass
class Read:
    inventory: Inventory
    view: OperatorView | None
    source: dict[str, Any] = field(default_factory=dict)  # {"cluster": {context, server, kubeconfig}} or {"file": …}


def read_nodes(nodes_file: Path | None, kubeconfig: str | None, context: str | None, selector: str | None, *,
               with_pods: bool = True, with_operator: bool = False, timeout: float | None = None,
               announce: bool = True) -> Read:
    """The GPU nodes (and driver pods; and the operator's configuration when asked) from a dump or a cluster.
    timeout bounds each request (kubectl's --request-timeout); announce=False leaves the terminal line and the
    no-GPU-node warning to the caller (a fleet report prints them per cluster)."""
    from gpualign import inventory

    if nodes_file:
        if kubeconfig or context:
            raise BadInput("--nodes-file reads a dump, --kubeconfig/--context a cluster: pass one of them")
        inv = inventory.from_file(nodes_file, selector)
        read = Read(inv, None, {"nodes_file": "<stdin>" if str(nodes_file) == "-" else str(nodes_file)})
        if announce:
            _say(f"nodes file {read.source['nodes_file']}: {len(inv.nodes)} GPU nodes")
    else:
        from gpualign.kube import Kube

        kube = Kube(kubeconfig, context, timeout=timeout) if timeout else Kube(kubeconfig, context)
        try:
            inv = inventory.from_cluster(kube, selector, with_pods=with_pods)
            if announce:
                _say(f"context {kube.context or '-'} ({kube.server}): {len(inv.nodes)} GPU nodes")
            view = inventory.operator_view(kube, inv.nodes) if with_operator else None
        finally:
            kube.close()
        read = Read(inv, view, {"cluster": kube.describe()})
    if not inv.nodes and announce:
        from gpualign.cli.common import warn

        warn(no_gpu_nodes(selector))
    return read


def no_gpu_nodes(selector: str | None) -> str:
    where = f" match -l {selector!r}" if selector else ""
    return f"no GPU nodes{where} (nodes labelled nvidia.com/gpu.present=true)"


def _say(text: str) -> None:
    """Which cluster or file was read: on a terminal only, so pipelines and logs stay clean."""
    if sys.stderr.isatty():
        print(f"gpualign: {text}", file=sys.stderr, flush=True)


def load_ledger(sources_given: list[str], docker_config: Path | None, *, missing_ok: bool = False) -> Any:
    """The merged ledger; on a terminal, a line before a registry is read (it can take a while) and one after.
    missing_ok: a registry repository nobody has pushed to is an empty ledger (it is about to be filled), not the
    mistyped name it otherwise is (exit 2)."""
    from gpualign.ledger import sources

    slow = [s for s in sources_given if sources.is_registry(s)]
    if slow:
        _say(f"reading ledger {', '.join(slow)} …")
    ledger = sources.load(sources_given, docker_config=docker_config, missing_ok=missing_ok)
    count = len(ledger.fingerprint)
    _say(f"ledger: {count:,} tags from {', '.join('<stdin>' if s == '-' else s for s in sources_given)}")
    odd = sorted(t for t in ledger.fingerprint if not _DRIVER_TAG.match(t.rsplit(":", 1)[-1]))
    if odd and len(odd) == count:
        from gpualign.cli.common import warn

        warn(f"no entry of the ledger looks like a driver image tag (<branch>-<kernel>-<os-tag> or "
             f"<version>-<os-tag>), e.g. {odd[0]!r}: is it the right file?")
    return ledger
