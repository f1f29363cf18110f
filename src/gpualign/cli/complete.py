"""Shell completion of values, as kubectl completes them: context names from the kubeconfig, GPU node names from the
cluster (a short request), lab scenarios. Each answers quietly: a kubeconfig or cluster that cannot be read
completes nothing rather than printing an error into the shell line."""

from __future__ import annotations

import contextlib


def contexts(incomplete: str) -> list[str]:
    with contextlib.suppress(Exception):
        from gpualign.kube import kubeconfig as kc

        files = kc.files_to_read(None)
        if files:
            names = [str(c["name"]) for c in kc.merge(files).config["contexts"]]
            return [n for n in names if n.startswith(incomplete)]
    return []


def gpu_nodes(incomplete: str) -> list[str]:
    with contextlib.suppress(Exception):
        from gpualign.usecases.nodes import gpu_node_names

        return [n for n in gpu_node_names() if n.startswith(incomplete)]
    return []


def scenarios(incomplete: str) -> list[str]:
    from gpualign.lab.scenarios import SCENARIOS

    return [n for n in SCENARIOS if n.startswith(incomplete)]


def module_types(incomplete: str) -> list[str]:
    return [t for t in ("auto", "open", "proprietary") if t.startswith(incomplete)]


def flavours(incomplete: str) -> list[str]:
    return [t for t in ("proprietary", "open") if t.startswith(incomplete)]


def cuda_versions(incomplete: str) -> list[str]:
    from gpualign.model.cuda import table

    return [v for v in table().known if v.startswith(incomplete)]
